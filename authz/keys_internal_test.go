package authz

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestReleaseRepeatedAfterCrash: authz died between the compare-and-set
// that took a finished head off its key and the publish of the next head's
// token. The redelivered callback releases again: the batch is no longer
// listed, and the current head gets its token; a further repeat adds no
// second one.
func TestReleaseRepeatedAfterCrash(t *testing.T) {
	s, table, ctx := internalService(t, `labels: {seq: {domain: pay, users: [alice], mode: atomic, priority: med, functions: {noop: {}}}}`)
	send := func() uint64 {
		t.Helper()
		rep, err := s.intake.submit(ctx, &submission{label: "seq", l: table.Labels["seq"], user: "alice", calls: []api.CallSpec{{Type: "noop"}}, key: "k", prio: pipeline.Med})
		if err != nil {
			t.Fatal(err)
		}
		return rep.ID
	}
	queued := func() []uint64 { return queuedIDs(ctx, t, s, pipeline.Med) }
	k1, k2 := send(), send()
	if got := queued(); len(got) != 1 || got[0] != k1 {
		t.Fatalf("queued %v, want only the key's head %d", got, k1)
	}
	// The compare-and-set of k1's release, and then the crash.
	if _, at, err := s.keyOrders.order.Remove(ctx, "pay", "k", k1); err != nil || at != 0 {
		t.Fatalf("remove: at %d, %v", at, err)
	}
	if got := queued(); len(got) != 1 {
		t.Fatalf("queued %v before the repeat, want k2 (%d) without a token", got, k2)
	}
	for range 2 {
		if err := s.keyOrders.releaseKey(ctx, "pay", "k", k1); err != nil {
			t.Fatal(err)
		}
		if got := queued(); len(got) != 2 || got[1] != k2 {
			t.Fatalf("queued %v after the repeated release, want [%d %d]", got, k1, k2)
		}
	}
}

// TestJoinRepairedAfterAFailedJoin: a keyed send whose batch was recorded
// but whose join of its key's order failed (here its request ended) is
// handed to the repair loop, which joins it: it becomes its key's head and
// gets one token. One cancelled before its join failed is taken off its
// key's order again and never queued.
func TestJoinRepairedAfterAFailedJoin(t *testing.T) {
	s, table, ctx := internalService(t, `labels: {seq: {domain: pay, users: [alice], mode: atomic, priority: med, functions: {noop: {}}}}`)
	loopCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.keyRepair.run(loopCtx) }()
	defer func() { stop(); testnats.Stopped(t, "repair loop", done) }()
	testnats.Eventually(t, 5*time.Second, "the loop takes hand-overs", func() bool {
		s.keyRepair.repairs.mu.Lock()
		defer s.keyRepair.repairs.mu.Unlock()
		return s.keyRepair.repairs.open
	})
	l := table.Labels["seq"]
	ended, end := context.WithCancel(ctx)
	end()
	record := func(key string) *pipeline.Batch {
		t.Helper()
		b, err := s.intake.build(ctx, &submission{label: "seq", l: l, user: "alice", calls: []api.CallSpec{{Type: "noop"}}, key: key, prio: pipeline.Med})
		if err != nil {
			t.Fatal(err)
		}
		return b.batch
	}
	failJoin := func(b *pipeline.Batch) {
		t.Helper()
		if head, err := s.keyOrders.admit(ended, b, false, l.KeyBound()); head || !errors.Is(err, errJoinLater) {
			t.Fatalf("a join whose request ended: head %v, %v; want it handed to the repair loop", head, err)
		}
	}

	joined := record("k")
	failJoin(joined)
	testnats.Eventually(t, 10*time.Second, "the batch joined its key and queued", func() bool {
		q, err := s.keyOrders.order.Load(ctx, "pay", "k")
		return err == nil && slices.Equal(q.IDs, []uint64{joined.ID}) && tokensOf(ctx, t, s, joined) == 1
	})

	cancelled := record("c")
	if _, err := s.removal.cancel(ctx, "alice", &api.IDRequest{ID: cancelled.ID}); err != nil {
		t.Fatal(err)
	}
	failJoin(cancelled)
	testnats.Eventually(t, 10*time.Second, "the cancelled batch's join repaired", func() bool {
		s.keyRepair.repairs.mu.Lock()
		defer s.keyRepair.repairs.mu.Unlock()
		return len(s.keyRepair.repairs.pending) == 0
	})
	if q, err := s.keyOrders.order.Load(ctx, "pay", "c"); err != nil || len(q.IDs) != 0 {
		t.Fatalf("key c after its cancelled batch's join was repaired: %+v, %v; want nobody waiting", q, err)
	}
	if n := tokensOf(ctx, t, s, cancelled); n != 0 {
		t.Fatalf("%d tokens of the cancelled batch, want none", n)
	}
}
