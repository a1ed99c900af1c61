package processor_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestCrashSafety abandons a step at each crash point, as if the processor
// died there, and lets a fresh processor carry on: nothing is lost, no
// completed function runs again, and there is exactly one terminal callback
// (and at most one dead letter).
func TestCrashSafety(t *testing.T) {
	transfer := fn(handlers.TypeTransfer, handlers.Transfer{From: "alice", To: "bob", Amount: 10})
	nonAtomic := pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{transfer, noop()}}
	atomicB := pipeline.Batch{Functions: []pipeline.Function{transfer, noop()}}
	atomicFailing := pipeline.Batch{Functions: []pipeline.Function{transfer, fn(handlers.TypeFail, handlers.FailArgs{Permanent: true})}}
	failing := pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{transfer, fn(handlers.TypeFail, handlers.FailArgs{Permanent: true})}}
	tests := []struct {
		name    string
		batch   pipeline.Batch
		point   string
		nth     int32 // crash at the nth time the point is reached
		want    pipeline.Status
		bob     int64
		deadLet int
	}{
		{name: "after the worker answered, before progress", batch: nonAtomic, point: processor.FaultAfterWork, nth: 1, want: pipeline.Executed, bob: 10},
		{name: "after progress, before the rotated token", batch: nonAtomic, point: processor.FaultAfterProgress, nth: 1, want: pipeline.Executed, bob: 10},
		{name: "after the rotated token, before the ack", batch: nonAtomic, point: processor.FaultAfterRequeue, nth: 1, want: pipeline.Executed, bob: 10},
		{name: "atomic: after the worker answered", batch: atomicB, point: processor.FaultAfterWork, nth: 1, want: pipeline.Executed, bob: 10},
		{name: "atomic: after the outcome, before the callback", batch: atomicB, point: processor.FaultAfterProgress, nth: 1, want: pipeline.Executed, bob: 10},
		{name: "atomic failing: after terminal progress, before the dead letter", batch: atomicFailing, point: processor.FaultAfterProgress, nth: 1, want: pipeline.Rejected, bob: 0, deadLet: 1},
		{name: "after the callback, before the ack", batch: nonAtomic, point: processor.FaultAfterCallback, nth: 1, want: pipeline.Executed, bob: 10},
		{name: "after the dead letter, before the callback", batch: failing, point: processor.FaultAfterDeadLetter, nth: 1, want: pipeline.PartiallyExecuted, bob: 10, deadLet: 1},
		{name: "failing: after terminal progress", batch: failing, point: processor.FaultAfterProgress, nth: 2, want: pipeline.PartiallyExecuted, bob: 10, deadLet: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			var seen, crashed atomic.Int32
			nc := b.env.Conn(t, "processor")
			p1, err := processor.New(b.ctx, nc, processor.WithFault(processor.Options{Domain: domain, Name: "doomed"}, func(point string) error {
				if point == tt.point && seen.Add(1) == tt.nth {
					crashed.Add(1)
					return errors.New("killed")
				}
				return nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			id := b.enqueue(t, tt.batch)
			testnats.Eventually(t, 10*time.Second, "the crash", func() bool {
				p1.Tick(b.ctx, 1)
				return crashed.Load() == 1
			})
			nc.Close() // the process is gone; its token comes back after AckWait
			p2 := b.processor(t, processor.Options{Name: "successor"})
			cb := b.outcome(t, p2, id)
			if cb.Outcome.Status != tt.want {
				t.Fatalf("outcome %s, want %s", cb.Outcome, tt.want)
			}
			// Let any leftover token come back and be dropped before counting.
			testnats.Eventually(t, 10*time.Second, "queues drained", func() bool {
				p2.Tick(b.ctx, 8)
				return b.queued(t) == 0
			})
			if n := len(b.callbacks(t)[id]); n != 1 {
				t.Fatalf("%d callbacks, want exactly 1", n)
			}
			if got := b.ledger.Balance("bob"); got != tt.bob {
				t.Fatalf("bob has %d, want %d: a completed transfer ran again or was lost", got, tt.bob)
			}
			for i := range tt.batch.Functions {
				if n := b.calls.get(key(id, i)); n > 1 {
					t.Fatalf("function %d ran %d times", i, n)
				}
			}
			if n := len(b.deadLetters(t)); n != tt.deadLet {
				t.Fatalf("%d dead letters, want %d", n, tt.deadLet)
			}
			// A batch that succeeded at its first step keeps no progress record.
			if pr, ok := b.tryProgress(t, id); ok && pr.State != records.Done {
				t.Fatalf("progress %+v", pr)
			}
		})
	}
}

// TestReplicas runs two processors on one domain, ticked concurrently over
// NATS, and checks every batch executed exactly once.
func TestReplicas(t *testing.T) {
	b := setup(t)
	p1 := b.processor(t, processor.Options{Name: "p1", Concurrency: 4})
	p2 := b.processor(t, processor.Options{Name: "p2", Concurrency: 4})
	runProcessor(t, b, p1)
	runProcessor(t, b, p2)
	var ids []uint64
	for i := range 40 {
		bt := pipeline.Batch{Functions: []pipeline.Function{noop()}}
		if i%2 == 1 {
			bt = pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{noop(), noop(), noop()}}
		}
		if i%3 == 0 {
			bt.Priority = pipeline.High
		}
		ids = append(ids, b.enqueue(t, bt))
	}
	ticker := b.env.Conn(t, "ticker")
	testnats.Eventually(t, 30*time.Second, "all callbacks", func() bool {
		pub(t, ticker, streams.TickSubject(domain), []byte("4"))
		pub(t, ticker, streams.TickSubject(domain), []byte("4"))
		return len(b.callbacks(t)) == len(ids)
	})
	cbs := b.callbacks(t)
	by := map[string]int{}
	for _, id := range ids {
		if len(cbs[id]) != 1 || cbs[id][0].Outcome.Status != pipeline.Executed {
			t.Fatalf("batch %d callbacks %+v", id, cbs[id])
		}
		by[cbs[id][0].Processor]++
	}
	for i, id := range ids {
		n := 1
		if i%2 == 1 {
			n = 3
		}
		for f := range n {
			if got := b.calls.get(key(id, f)); got != 1 {
				t.Fatalf("batch %d function %d ran %d times", id, f, got)
			}
		}
	}
	t.Logf("finished by replica: %v", by)
}
