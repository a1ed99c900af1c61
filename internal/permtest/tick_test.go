package permtest

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestAnyoneMayTick: ticks are permissionless, every role may publish
// tick.<domain>; the grant is tick.> exactly, not the bare subject "tick".
func TestAnyoneMayTick(t *testing.T) {
	s := start(t)
	ticks := make(chan *nats.Msg, 1)
	if _, err := s.adminNC.ChanSubscribe("tick.>", ticks); err != nil {
		t.Fatal(err)
	}
	if err := s.adminNC.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, user := range roles {
		t.Run(user, func(t *testing.T) {
			r := s.as(t, user)
			t.Run("allowed", func(t *testing.T) {
				if err := r.nc.Publish(streams.TickSubject(domain), []byte(user)); err != nil {
					t.Fatal(err)
				}
				m, ok := testnats.Receive(ticks, opWait)
				if !ok || string(m.Data) != user {
					t.Fatalf("admin received %v, want %s's tick%s", m, user, r.reported())
				}
			})
			t.Run("denied", func(t *testing.T) {
				if user == "admin" {
					t.Skip("admin may publish anything")
				}
				r.deniedPublish(t, "tick")
			})
		})
	}
}

// TestTickReports: a processor answers a tick with its report, and only the
// ticker may read it. A publisher chooses its reply subject freely, and the
// server does not check it, so a tick whose reply names a stream subject
// must not let the processor's answer land there: answers go to the
// ticker's inbox only, never past the processor's own permissions.
//
// Permissions cannot cover a reply aimed at a subject the responder may
// publish to anyway ($KV.progress.>, requeue.>, callbacks.> for a
// processor; batches.>, $KV.batches.> for authz): there the service checks
// the reply subject itself (TestNoServiceWritesWhereACallerPoints).
func TestTickReports(t *testing.T) {
	s := start(t)
	proc := s.serveTicks(t)
	ticker := s.as(t, "ticker")
	alice := s.as(t, "alice")

	tests := []struct {
		name string
		// reply is the reply subject alice puts on her tick.
		reply string
		// stream, when set, is the stream the reply subject belongs to.
		stream string
	}{
		{name: "into a queue", reply: streams.TokenSubject(pipeline.High, domain), stream: streams.StreamHigh},
		{name: "over a batch record", reply: kvSubject(streams.BucketBatches, streams.BatchKey(99)), stream: kvStream(streams.BucketBatches)},
		{name: "over the domain state", reply: kvSubject(streams.BucketDomainStates, domain), stream: kvStream(streams.BucketDomainStates)},
		{name: "into alice's inbox", reply: "_INBOX_alice.report"},
	}
	t.Run("allowed", func(t *testing.T) {
		ticker.allowed(t, "read a tick's report", ticker.request(streams.TickSubject(domain), "report"))
	})
	for _, tt := range tests {
		t.Run("denied "+tt.name, func(t *testing.T) {
			var before uint64
			if tt.stream != "" {
				before = s.msgs(t, tt.stream)
			}
			if err := alice.nc.PublishMsg(&nats.Msg{Subject: streams.TickSubject(domain), Reply: tt.reply, Data: []byte("1")}); err != nil {
				t.Fatal(err)
			}
			proc.wantViolation(t, pubViolation(tt.reply))
			if tt.stream == "" {
				return
			}
			if after := s.msgs(t, tt.stream); after != before {
				t.Errorf("stream %s grew from %d to %d: the processor's answer to alice's tick landed on %s", tt.stream, before, after, tt.reply)
			}
		})
	}
}
