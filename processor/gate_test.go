package processor_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/streams"
)

// keyGate finds a batch with Key "held" not executable until released.
type keyGate struct{ released atomic.Bool }

func (g *keyGate) Executable(_ context.Context, b *pipeline.Batch, _ *streams.Progress) (bool, time.Duration, error) {
	if b.Key == "held" && !g.released.Load() {
		return false, 50 * time.Millisecond, nil
	}
	return true, 0, nil
}

// TestGateSetsAside: a batch the gate finds not executable is set aside
// without blocking the batches queued behind it, and runs once it may.
func TestGateSetsAside(t *testing.T) {
	b := setup(t)
	gate := &keyGate{}
	p := b.processor(t, processor.Options{Gate: gate})
	held := b.enqueue(t, pipeline.Batch{Key: "held", Functions: []pipeline.Function{noop()}})
	next := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	if sr := step(t, b.ctx, p); sr.BatchID != held || sr.Action != api.ActionSetAside {
		t.Fatalf("first step: %+v", sr)
	}
	if cb := b.outcome(t, p, next); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("the batch behind: %s", cb.Outcome)
	}
	if b.calls.get(key(held, 0)) != 0 {
		t.Fatal("the held batch ran")
	}
	gate.released.Store(true)
	if cb := b.outcome(t, p, held); cb.Outcome.Status != pipeline.Executed || cb.Attempts != 1 {
		t.Fatalf("the held batch: %s after %d attempts", cb.Outcome, cb.Attempts)
	}
}
