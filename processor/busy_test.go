package processor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// TestSlowHandlersAreNotFailures: one worker slot, a handler slower than the
// work timeout and several batches at once. Calls that wait for the slot,
// or time out while the handler runs on, are not failed attempts: every
// batch ends Executed after exactly one execution, with no retry budget
// spent and no dead letter.
func TestSlowHandlersAreNotFailures(t *testing.T) {
	b := setup(t)
	b.mux.RegisterFunc("slow", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		<-time.After(400 * time.Millisecond) // the work itself, past its deadline
		return pipeline.Result{Data: pipeline.MustPayload("done")}, nil
	})
	b.startWorkerWith(t, b.ctx, worker.Options{Concurrency: 1})
	p := b.processor(t, processor.Options{WorkTimeout: 250 * time.Millisecond})
	var ids []uint64
	for range 4 {
		// No retry logic: one counted failure would reject the batch.
		ids = append(ids, b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
			Functions: []pipeline.Function{{Type: "slow"}}}))
	}
	testnats.Eventually(t, 30*time.Second, "every callback", func() bool {
		p.Tick(b.ctx, 8)
		return len(b.callbacks(t)) == len(ids)
	})
	cbs := b.callbacks(t)
	for _, id := range ids {
		cb := cbs[id]
		if len(cb) != 1 || cb[0].Outcome.Status != pipeline.Executed {
			t.Fatalf("batch %d: callbacks %+v", id, cb)
		}
		if cb[0].Attempts != 1 {
			t.Fatalf("batch %d: %d attempts, want 1", id, cb[0].Attempts)
		}
		if n := b.calls.get(key(id, 0)); n != 1 {
			t.Fatalf("batch %d: handler ran %d times, want 1", id, n)
		}
	}
	if dls := b.deadLetters(t); len(dls) != 0 {
		t.Fatalf("dead letters: %+v", dls)
	}
}

// TestNoWorkerIsBounded: a function type no worker serves is retried
// without counting attempts, but not forever: past MaxWait the function
// fails permanently, with a dead letter and one callback.
func TestNoWorkerIsBounded(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{MaxWait: 600 * time.Millisecond})
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions: []pipeline.Function{noop(), {Type: "nobody.serves"}}})
	var busy int
	testnats.Eventually(t, 20*time.Second, "the callback", func() bool {
		for _, s := range p.Tick(b.ctx, 1).Steps {
			if s.Action == api.ActionBusy {
				busy++
			}
		}
		return len(b.callbacks(t)[id]) > 0
	})
	cb := b.callbacks(t)[id][0]
	if cb.Outcome.Status != pipeline.PartiallyExecuted || cb.Outcome.Executed != 1 {
		t.Fatalf("outcome %s, want PartiallyExecuted(1)", cb.Outcome)
	}
	if busy < 2 || busy > 12 {
		t.Fatalf("%d busy retries in %s: want a few, with backoff", busy, 600*time.Millisecond)
	}
	if dls := b.deadLetters(t); len(dls) != 1 || dls[0].Index != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
}

// TestUnansweredFallbackIsAskedAgain: a function given up on whose fallback
// request goes unanswered (the fallback runs past the work timeout) keeps
// its failure recorded and asks for the fallback again, instead of taking
// the silence for a failed fallback or running the function again.
func TestUnansweredFallbackIsAskedAgain(t *testing.T) {
	b := setup(t)
	var fallbacks atomic.Int32
	b.mux.RegisterFunc("declined", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.Permanent(errors.New("declined"))
	})
	b.mux.RegisterFallback("declined", pipeline.FallbackFunc(func(context.Context, *pipeline.Call, pipeline.Failure) (pipeline.Result, error) {
		fallbacks.Add(1)
		<-time.After(400 * time.Millisecond) // past its deadline
		return pipeline.Result{Data: pipeline.MustPayload("handled")}, nil
	}))
	b.startWorker(t, b.ctx)
	p := b.processor(t, processor.Options{WorkTimeout: 250 * time.Millisecond})
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions: []pipeline.Function{{Type: "declined"}}})
	cb := b.outcome(t, p, id)
	if cb.Outcome.Status != pipeline.Executed || !cb.Fallback {
		t.Fatalf("callback %+v, want Executed by the fallback", cb)
	}
	if pr := b.progress(t, id); pr.FailuresOf(0) != 1 || pr.FallbackDue != nil {
		t.Fatalf("progress %+v, want one failure counted and no fallback due", pr)
	}
	if n, f := b.calls.get(key(id, 0)), fallbacks.Load(); n != 1 || f != 1 {
		t.Fatalf("function ran %d times and its fallback %d, want 1 and 1", n, f)
	}
}
