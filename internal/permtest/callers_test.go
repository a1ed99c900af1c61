package permtest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestTicker: the ticker publishes ticks and nothing else; it has no
// JetStream access at all.
func TestTicker(t *testing.T) {
	s := start(t)
	ticker := s.as(t, "ticker")
	s.serveTicks(t)
	ticks := make(chan *nats.Msg, 1)
	if _, err := s.adminNC.ChanSubscribe("tick.>", ticks); err != nil {
		t.Fatal(err)
	}
	if err := s.adminNC.Flush(); err != nil {
		t.Fatal(err)
	}
	tick := func(t *testing.T, subject string) {
		t.Helper()
		if err := ticker.nc.Publish(subject, []byte("1")); err != nil {
			t.Fatal(err)
		}
		m, ok := testnats.Receive(ticks, opWait)
		if !ok || m.Subject != subject {
			t.Fatalf("admin received %v, want the tick on %s%s", m, subject, ticker.reported())
		}
	}

	runBoundaries(t, []boundary{
		{
			name: "ticks but enqueues nothing",
			allowed: func(t *testing.T) {
				tick(t, streams.TickSubject(domain))
			},
			denied: func(t *testing.T) {
				s.deniedInto(t, ticker, streams.StreamHigh, highToken(), ticker.jsPublish(highToken()))
				ticker.deniedPublish(t, highToken())
			},
		},
		{
			name: "reads tick reports but publishes no callbacks",
			allowed: func(t *testing.T) {
				ticker.allowed(t, "read a tick's report", ticker.request(streams.TickSubject(domain), "report"))
				// The request's tick reached admin's subscription too.
				if _, ok := testnats.Receive(ticks, opWait); !ok {
					t.Fatal("admin did not see the requested tick")
				}
			},
			denied: func(t *testing.T) {
				subj := streams.CallbackSubject(domain)
				s.deniedInto(t, ticker, streams.StreamCallbacks, subj, ticker.jsPublish(subj))
			},
		},
		{
			name: "ticks any domain but has no JetStream API",
			allowed: func(t *testing.T) {
				tick(t, streams.TickSubject("reports"))
			},
			denied: func(t *testing.T) {
				ticker.denied(t, "$JS.API.INFO", func(ctx context.Context) error {
					_, err := ticker.js.AccountInfo(ctx)
					return err
				})
				ticker.denied(t, "$JS.API.STREAM.INFO."+streams.StreamHigh, func(ctx context.Context) error {
					_, err := ticker.js.Stream(ctx, streams.StreamHigh)
					return err
				})
			},
		},
	})
}

// TestCallers: callers (alice, bob), the owner and the oracle speak to
// authz under their own name only; the oracle confirms through authz, and
// none of them reaches the queues or the confirmations' stream.
func TestCallers(t *testing.T) {
	s := start(t)
	s.serveAuthz(t)
	owner := s.as(t, "owner")
	alice := s.as(t, "alice")
	bob := s.as(t, "bob")
	oracle := s.as(t, "oracle")
	confirm := streams.ConfirmSubject(domain, 1, 0)

	runBoundaries(t, []boundary{
		{
			name: "alice speaks to authz as alice, not as bob",
			allowed: func(t *testing.T) {
				alice.allowed(t, "send to authz", alice.request(streams.AuthzSubject("alice", api.OpSend), "alice"))
			},
			denied: func(t *testing.T) {
				subj := streams.AuthzSubject("bob", api.OpSend)
				alice.denied(t, subj, alice.request(subj, "bob"))
				alice.deniedPublish(t, streams.AuthzSubject("owner", api.OpPause))
			},
		},
		{
			name: "bob speaks to authz as bob, not as alice",
			allowed: func(t *testing.T) {
				bob.allowed(t, "send to authz", bob.request(streams.AuthzSubject("bob", api.OpSend), "bob"))
			},
			denied: func(t *testing.T) {
				subj := streams.AuthzSubject("alice", api.OpSend)
				bob.denied(t, subj, bob.request(subj, "alice"))
				many := streams.AuthzSubject("alice", api.OpSendMany)
				bob.denied(t, many, bob.request(many, "alice"))
			},
		},
		{
			name: "callers submit through authz, never to the queues",
			allowed: func(t *testing.T) {
				alice.allowed(t, "submit through authz", alice.request(streams.AuthzSubject("alice", "submit"), "alice"))
			},
			denied: func(t *testing.T) {
				for _, r := range []*role{alice, bob} {
					s.deniedInto(t, r, streams.StreamHigh, highToken(), r.jsPublish(highToken()))
					s.deniedInto(t, r, streams.StreamMed, medToken(), r.jsPublish(medToken()))
				}
			},
		},
		{
			name: "confirmations go through authz, never straight to the stream",
			allowed: func(t *testing.T) {
				oracle.allowed(t, "confirm through authz", oracle.request(streams.AuthzSubject("oracle", api.OpConfirm), "oracle"))
			},
			denied: func(t *testing.T) {
				for _, r := range []*role{alice, bob, owner, oracle} {
					s.deniedInto(t, r, streams.StreamConfirm, confirm, r.jsPublish(confirm))
				}
			},
		},
		{
			name: "the oracle speaks to authz as the oracle but reaches no queue",
			allowed: func(t *testing.T) {
				oracle.allowed(t, "send to authz", oracle.request(streams.AuthzSubject("oracle", api.OpConfirm), "oracle"))
			},
			denied: func(t *testing.T) {
				s.deniedInto(t, oracle, streams.StreamHigh, highToken(), oracle.jsPublish(highToken()))
				subj := streams.AuthzSubject("alice", api.OpSend)
				oracle.denied(t, subj, oracle.request(subj, "alice"))
			},
		},
		{
			name: "the owner operates through authz, never on the queues nor through discovery",
			allowed: func(t *testing.T) {
				owner.allowed(t, "pause a domain through authz", owner.request(streams.AuthzSubject("owner", api.OpPause), "owner"))
			},
			denied: func(t *testing.T) {
				s.deniedInto(t, owner, streams.StreamHigh, highToken(), owner.jsPublish(highToken()))
				// Discovery is admin's: the micro library answers it with
				// the service's rights on any reply subject.
				srv := "$SRV.INFO." + streams.AuthzService
				owner.denied(t, srv, func(ctx context.Context) error {
					_, err := owner.nc.RequestWithContext(ctx, srv, nil)
					return err
				})
				subj := streams.AuthzSubject("alice", api.OpSend)
				owner.denied(t, subj, owner.request(subj, "alice"))
			},
		},
	})
}
