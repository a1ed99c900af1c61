package authz

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
)

// countingStream counts the messages read from a stream.
type countingStream struct {
	jetstream.Stream
	reads atomic.Int64
}

func (c *countingStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	c.reads.Add(1)
	return c.Stream.GetMsg(ctx, seq, opts...)
}

// TestInFlightReadsOnlyWhatItLists: a listing of the oldest few batches of
// a deep queue reads about as many tokens as it lists, not the whole queue;
// only a listing that asks for the total reads every token.
func TestInFlightReadsOnlyWhatItLists(t *testing.T) {
	s, table, ctx := internalService(t, `labels: {jobs: {domain: pay, users: [alice], mode: non_atomic, priority: med, functions: {noop: {}}}}`)
	const queued, limit = 40, 5
	var ids []uint64
	for range queued {
		rep, err := s.intake.submit(ctx, &submission{label: "jobs", l: table.Labels["jobs"], user: "alice", calls: []api.CallSpec{{Type: "noop"}}, prio: pipeline.Med})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rep.ID)
	}
	med := &countingStream{Stream: s.inspect.queues[pipeline.Med]}
	s.inspect.queues[pipeline.Med] = med

	out, err := s.inspect.inflight(ctx, "owner", &api.InFlightRequest{Domain: "pay", Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	rep := out.(*api.InFlightReply)
	if len(rep.Items) != limit || rep.Items[0].ID != ids[0] || rep.Items[limit-1].ID != ids[limit-1] || !rep.More || rep.Total != nil {
		t.Fatalf("limit %d: %d items, more %v, total %v", limit, len(rep.Items), rep.More, rep.Total)
	}
	if n := med.reads.Load(); n > limit+1 {
		t.Fatalf("listing %d of %d batches read %d tokens, want at most %d", limit, queued, n, limit+1)
	}

	med.reads.Store(0)
	if out, err = s.inspect.inflight(ctx, "owner", &api.InFlightRequest{Domain: "pay", Limit: limit, Total: true}); err != nil {
		t.Fatal(err)
	}
	rep = out.(*api.InFlightReply)
	if len(rep.Items) != limit || !rep.More || rep.Total == nil || *rep.Total != queued {
		t.Fatalf("with the total: %d items, more %v, total %v", len(rep.Items), rep.More, rep.Total)
	}
	if n := med.reads.Load(); n != queued+1 { // every token, and the end
		t.Fatalf("counting read %d tokens, want %d", n, queued+1)
	}
}
