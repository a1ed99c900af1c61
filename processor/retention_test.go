package processor_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestCallbackAtOfAFirstStepSuccess: a batch that succeeds at its first
// step writes no progress, yet its callback says when it finished, as
// one of several steps does.
func TestCallbackAtOfAFirstStepSuccess(t *testing.T) {
	for _, tc := range []struct {
		name  string
		batch pipeline.Batch
	}{
		{"one function", pipeline.Batch{Functions: []pipeline.Function{noop()}, Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}}},
		{"atomic unit", pipeline.Batch{Functions: []pipeline.Function{noop(), noop()}}},
		{"two functions", pipeline.Batch{Functions: []pipeline.Function{noop(), noop()}, Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			p := b.processor(t, processor.Options{})
			sent := time.Now()
			id := b.enqueue(t, tc.batch)
			cb := b.outcome(t, p, id)
			if cb.Outcome.Status != pipeline.Executed {
				t.Fatalf("outcome %s, want executed", cb.Outcome)
			}
			if cb.At.IsZero() || cb.At.Before(sent.Add(-time.Millisecond)) {
				t.Fatalf("callback at %v: want when the batch finished, at or after it was sent (%v)", cb.At, sent)
			}
		})
	}
}

// TestDoneProgressExpires: the progress record a processor writes done
// goes after the finished age, and a running batch's record stays.
func TestDoneProgressExpires(t *testing.T) {
	b := setup(t, func(s *streams.Settings) { s.FinishedMaxAge = time.Second })
	p := b.processor(t, processor.Options{})
	failed := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop(), {Type: handlers.TypeFail}}, Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}})
	if cb := b.outcome(t, p, failed); cb.Outcome.Status != pipeline.PartiallyExecuted {
		t.Fatalf("outcome %s, want partially executed", cb.Outcome)
	}
	kv := b.progressKV(t)
	testnats.Eventually(t, 15*time.Second, "the done progress record expired", func() bool {
		_, err := kv.Get(b.ctx, streams.ProgressKey(domain, failed))
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
	st, err := b.admin.Stream(b.ctx, "KV_"+streams.BucketProgress)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Fatalf("progress bucket holds %d messages after expiry, want 0 (no marker left behind)", n)
	}
}
