package processor_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestWaitingForAWorkerIsRecordedOnce: a batch whose function type no
// worker serves says so in its progress after its first put-back, and
// further put-backs write nothing; once a worker serves the type, the
// batch runs and the reason is gone.
func TestWaitingForAWorkerIsRecordedOnce(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{MaxWait: time.Hour})
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions: []pipeline.Function{{Type: "late.type"}}})
	kv := b.progressKV(t)
	key := streams.ProgressKey(domain, id)
	var rev uint64
	testnats.Eventually(t, 10*time.Second, "the waiting reason", func() bool {
		p.Tick(b.ctx, 1)
		e, err := kv.Get(b.ctx, key)
		if err != nil {
			return false
		}
		rev = e.Revision()
		return true
	})
	prog := b.progress(t, id)
	if prog.Waiting == nil || prog.Waiting.Reason != "no worker serves `late.type`" || prog.Waiting.Type != "late.type" {
		t.Fatalf("progress %+v: want the waiting reason", prog)
	}
	if prog.Attempts(false) != 0 {
		t.Fatalf("%d attempts counted, want none", prog.Attempts(false))
	}
	for range 3 {
		testnats.Eventually(t, 15*time.Second, "a put-back", func() bool {
			for _, s := range p.Tick(b.ctx, 1).Steps {
				if s.BatchID == id && s.Action == api.ActionBusy {
					return true
				}
			}
			return false
		})
	}
	if e, err := kv.Get(b.ctx, key); err != nil || e.Revision() != rev {
		t.Fatalf("progress rewritten while the reason stayed: revision %v (was %d), err %v", e, rev, err)
	}
	b.mux.RegisterFunc("late.type", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
	b.startWorker(t, b.ctx)
	cb := b.outcome(t, p, id)
	if cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s, want Executed", cb.Outcome)
	}
	if prog := b.progress(t, id); prog.Waiting != nil {
		t.Fatalf("finished batch still waiting: %+v", prog.Waiting)
	}
}
