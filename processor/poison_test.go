package processor_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestPoisonTokensEndVisibly: a token the processor cannot reconcile with
// its batch's records is tried again a bounded number of times, with
// backoff, and then the batch ends failed, with a dead letter naming the
// reason and exactly one callback: never a loop.
func TestPoisonTokensEndVisibly(t *testing.T) {
	twoSteps := pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{noop(), noop()}}
	// A batch too large for its token to carry a copy: the processor reads its record.
	large := pipeline.Batch{Functions: []pipeline.Function{{Type: noop().Type, Payload: pipeline.MustPayload(strings.Repeat("x", streams.MaxTokenBatch))}}}
	tests := []struct {
		name   string
		batch  pipeline.Batch
		steps  int // steps taken before the records are spoilt
		spoil  func(t *testing.T, b *bundle, id uint64)
		reason string
	}{
		{name: "token ahead of its progress record", batch: twoSteps, steps: 1, reason: "ahead of its progress record",
			spoil: func(t *testing.T, b *bundle, id uint64) {
				if err := b.progressKV(t).Delete(b.ctx, streams.ProgressKey(domain, id)); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "progress record that does not decode", batch: twoSteps, steps: 1, reason: "progress record of batch",
			spoil: func(t *testing.T, b *bundle, id uint64) {
				if _, err := b.progressKV(t).Put(b.ctx, streams.ProgressKey(domain, id), []byte("\xc1 not msgpack")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "batch record that does not decode", batch: large, reason: "batch record of batch",
			spoil: func(t *testing.T, b *bundle, id uint64) {
				kv, err := b.admin.KeyValue(b.ctx, streams.BucketBatches)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := kv.Put(b.ctx, streams.BatchKey(id), []byte("\xc1 not msgpack")); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			p := b.processor(t, processor.Options{PoisonRetries: 2})
			id := b.enqueue(t, tt.batch)
			for range tt.steps {
				step(t, b.ctx, p)
			}
			tt.spoil(t, b, id)
			var held, other int
			start := time.Now()
			testnats.Eventually(t, 15*time.Second, "the batch dead-lettered", func() bool {
				for _, s := range p.Tick(b.ctx, 1).Steps {
					if s.Action == api.ActionHeld {
						held++
					} else {
						other++
					}
				}
				return len(b.callbacks(t)[id]) > 0
			})
			if held != 2 || other != 1 {
				t.Fatalf("%d held steps and %d others, want 2 and 1 (the last one finishing)", held, other)
			}
			if d := time.Since(start); d < 500*time.Millisecond {
				t.Fatalf("dead-lettered after %s: the retries had no backoff", d)
			}
			cbs := b.callbacks(t)[id]
			if len(cbs) != 1 || cbs[0].Outcome.Status != pipeline.Rejected || !strings.Contains(cbs[0].Outcome.Reason, tt.reason) {
				t.Fatalf("callbacks %+v, want one Rejected naming %q", cbs, tt.reason)
			}
			dls := b.deadLetters(t)
			if len(dls) != 1 || dls[0].Batch.ID != id || !strings.Contains(dls[0].Error, tt.reason) || cbs[0].DeadLetter == 0 {
				t.Fatalf("dead letters %+v", dls)
			}
			testnats.Eventually(t, 5*time.Second, "queues drained", func() bool {
				p.Tick(b.ctx, 8)
				return b.queued(t) == 0
			})
			if pr := b.progress(t, id); pr.State != records.Done {
				t.Fatalf("progress %+v, want done", pr)
			}
		})
	}
}

// TestOutputsTooLargeEndTheBatch: a non-atomic batch whose outputs outgrow
// what a progress record, a work request and a dead letter can carry ends
// PartiallyExecuted at the function whose output does not fit, with a
// dead letter that fits, instead of retrying its progress write forever.
func TestOutputsTooLargeEndTheBatch(t *testing.T) {
	b := setup(t)
	big := pipeline.MustPayload(strings.Repeat("x", 64<<10))
	b.mux.RegisterFunc("big", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: big}, nil
	})
	b.startWorker(t, b.ctx)
	p := b.processor(t, processor.Options{})
	fns := make([]pipeline.Function, 20)
	for i := range fns {
		fns[i] = pipeline.Function{Type: "big"}
	}
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: fns})
	cb := b.outcome(t, p, id)
	n := cb.Outcome.Executed
	if cb.Outcome.Status != pipeline.PartiallyExecuted || n < 10 || n >= len(fns) || !strings.Contains(cb.Outcome.Reason, "max_payload") {
		t.Fatalf("outcome %s (%s), want PartiallyExecuted(n) naming max_payload", cb.Outcome, cb.Outcome.Reason)
	}
	dls := b.deadLetters(t)
	if len(dls) != 1 || dls[0].Index != n || len(dls[0].Outputs) != n {
		t.Fatalf("%d dead letters (index %d, %d outputs), want 1 at function %d", len(dls), dls[0].Index, len(dls[0].Outputs), n)
	}
	for i := range fns {
		want := 0
		if i <= n {
			want = 1 // function n ran; its output is what could not be kept
		}
		if got := b.calls.get(key(id, i)); got != want {
			t.Fatalf("function %d ran %d times, want %d", i, got, want)
		}
	}
	testnats.Eventually(t, 5*time.Second, "queues drained", func() bool {
		p.Tick(b.ctx, 8)
		return b.queued(t) == 0
	})
}
