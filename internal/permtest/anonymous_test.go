package permtest

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestAnonymousMayOnlyTick: a connection without credentials is nats.conf's
// no_auth_user "anyone", so `nats pub tick.<domain> ”` works with no
// account, and nothing else does.
func TestAnonymousMayOnlyTick(t *testing.T) {
	s := start(t)
	ticks := make(chan *nats.Msg, 1)
	if _, err := s.adminNC.ChanSubscribe("tick.>", ticks); err != nil {
		t.Fatal(err)
	}
	if err := s.adminNC.Flush(); err != nil {
		t.Fatal(err)
	}
	violations := make(chan error, 8)
	nc, err := streams.Connect(streams.Credentials{Name: "anonymous"}, s.env.Server.InProcess(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				violations <- err
			}
		}))
	if err != nil {
		t.Fatalf("anonymous connect: %v", err)
	}
	t.Cleanup(nc.Close)
	if err := nc.Publish(streams.TickSubject(domain), nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := testnats.Receive(ticks, opWait); !ok {
		t.Fatal("an anonymous tick was not delivered")
	}
	before := s.msgs(t, streams.StreamHigh)
	for _, subject := range []string{highToken(), streams.CallbackSubject(domain), "authz.alice.send"} {
		if err := nc.Publish(subject, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if _, ok := testnats.Receive(violations, opWait); !ok {
			t.Fatalf("anonymous publish to %s was not denied", subject)
		}
	}
	if after := s.msgs(t, streams.StreamHigh); after != before {
		t.Fatalf("HIGH grew from %d to %d", before, after)
	}
}
