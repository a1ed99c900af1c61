package processor_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestTokenAckedOnlyOnceItsCallbackIsStored: the callback is published
// asynchronously, and the token is acknowledged only when its PubAck
// arrives. A callback the server does not store leaves the token queued
// (the step reports an error) and it is redelivered; once callbacks can be
// stored again the batch ends with exactly one callback.
func TestTokenAckedOnlyOnceItsCallbackIsStored(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	id := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	if err := b.admin.DeleteStream(b.ctx, streams.StreamCallbacks); err != nil {
		t.Fatal(err)
	}
	sr := step(t, b.ctx, p)
	if sr.BatchID != id || sr.Action != api.ActionError {
		t.Fatalf("a step whose callback was not stored reported %+v, want an error", sr)
	}
	if n := b.tokens(t, sr.Priority); n != 1 {
		t.Fatalf("the token was acknowledged although its callback was not stored: %d tokens queued, want 1", n)
	}
	if err := streams.Provision(b.ctx, b.admin, b.env.Settings, domain); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "the batch finished once callbacks are stored", func() bool {
		rep := p.Tick(b.ctx, 1)
		return len(rep.Steps) == 1 && rep.Steps[0].Action == api.ActionFinished
	})
	// An ack is a one-way publish: the stream drops the token a moment later.
	testnats.Eventually(t, 5*time.Second, "the token acknowledged", func() bool { return b.tokens(t, sr.Priority) == 0 })
	if cbs := b.callbacks(t); len(cbs[id]) != 1 || cbs[id][0].Outcome.Status != pipeline.Executed {
		t.Fatalf("callbacks of batch %d: %+v, want one Executed", id, cbs[id])
	}
}

// TestTickAcknowledgesBeforeItReports: a tick reports only once every
// callback of the batches it finished is stored, and acknowledges every
// token it settled.
func TestTickAcknowledgesBeforeItReports(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{Concurrency: 8})
	const n = 20
	ids := map[uint64]bool{}
	for range n {
		ids[b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})] = true
	}
	done := 0
	testnats.Eventually(t, 10*time.Second, "every batch stepped", func() bool {
		rep := p.Tick(b.ctx, n)
		for _, s := range rep.Steps {
			if s.Action != api.ActionFinished {
				t.Fatalf("step %+v, want finished", s)
			}
		}
		done += len(rep.Steps)
		return done == n
	})
	testnats.Eventually(t, 5*time.Second, "every token acknowledged", func() bool { return b.queued(t) == 0 })
	cbs := b.callbacks(t)
	for id := range ids {
		if len(cbs[id]) != 1 {
			t.Fatalf("batch %d has %d callbacks, want 1", id, len(cbs[id]))
		}
	}
}
