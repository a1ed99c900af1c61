package processor_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestStepsShareAUnitRequest: the atomic units of a tick's concurrent steps
// travel to the workers together, several in one request, and each batch
// still runs its functions once and ends with one callback.
func TestStepsShareAUnitRequest(t *testing.T) {
	b := setup(t)
	single, batched := countUnitRequests(t, b)
	p := b.processor(t, processor.Options{Concurrency: 32})
	const n = 64
	ids := make([]uint64, 0, n)
	for range n {
		ids = append(ids, b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop(), noop()}}))
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
	if got := single.Load() + batched.Load(); got >= n || batched.Load() == 0 {
		t.Fatalf("%d unit requests and %d requests of several units for %d batches: want fewer requests than batches", single.Load(), batched.Load(), n)
	}
	cbs := b.callbacks(t)
	for _, id := range ids {
		if len(cbs[id]) != 1 || cbs[id][0].Outcome.Status != pipeline.Executed {
			t.Fatalf("callbacks of batch %d: %+v", id, cbs[id])
		}
		for i := range 2 {
			if runs := b.calls.get(key(id, i)); runs != 1 {
				t.Fatalf("function %d of batch %d ran %d times", i, id, runs)
			}
		}
	}
}

// TestASlowUnitHoldsUpOnlyItsOwnRequest: while the processor's requests in
// flight wait for slow handlers, a later step's unit does not wait for
// them: after a moment it goes in a request of its own.
func TestASlowUnitHoldsUpOnlyItsOwnRequest(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	started := make(chan struct{}, 4)
	b.mux.RegisterFunc("held", func(ctx context.Context, _ *pipeline.Call) (pipeline.Result, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return pipeline.Result{}, nil
	})
	p := b.processor(t, processor.Options{Concurrency: 8})
	for range 2 {
		b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{{Type: "held"}}})
	}
	held := make(chan api.TickReport, 1)
	go func() {
		var rep api.TickReport
		for len(rep.Steps) == 0 {
			rep = p.Tick(b.ctx, 2)
		}
		held <- rep
	}()
	<-started
	<-started
	fast := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	if sr := step(t, b.ctx, p); sr.BatchID != fast || sr.Action != api.ActionFinished {
		t.Fatalf("the later step: %+v, want batch %d finished", sr, fast)
	}
	select {
	case rep := <-held:
		t.Fatalf("the held steps ended before they were released: %+v", rep)
	default:
	}
	unblock()
	if rep := <-held; len(rep.Steps) != 2 {
		t.Fatalf("held steps: %+v", rep)
	}
}

// TestALoneUnitGoesToTheUnitsEndpoint: a step whose unit finds no other
// waiting still goes to the endpoint for several units (one unit in the
// request), where the worker writes its claim and record pipelined; the
// batch runs once and ends with one callback.
func TestALoneUnitGoesToTheUnitsEndpoint(t *testing.T) {
	b := setup(t)
	single, batched := countUnitRequests(t, b)
	p := b.processor(t, processor.Options{Concurrency: 1})
	id := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop(), noop()}})
	if sr := step(t, b.ctx, p); sr.BatchID != id || sr.Action != api.ActionFinished {
		t.Fatalf("step %+v, want batch %d finished", sr, id)
	}
	testnats.Eventually(t, 5*time.Second, "the request seen", func() bool { return single.Load()+batched.Load() > 0 })
	if single.Load() != 0 || batched.Load() != 1 {
		t.Fatalf("%d requests on %s and %d on %s, want the one on %s", single.Load(), streams.WorkUnitSubject, batched.Load(), streams.WorkUnitsSubject, streams.WorkUnitsSubject)
	}
	if cbs := b.callbacks(t); len(cbs[id]) != 1 || cbs[id][0].Outcome.Status != pipeline.Executed {
		t.Fatalf("callbacks: %+v", cbs[id])
	}
	for i := range 2 {
		if runs := b.calls.get(key(id, i)); runs != 1 {
			t.Fatalf("function %d ran %d times", i, runs)
		}
	}
}

// countUnitRequests counts, from now on, the work requests that carry one
// unit (single) and those that carry several (batched).
func countUnitRequests(t *testing.T, b *bundle) (single, batched *atomic.Int32) {
	t.Helper()
	single, batched = new(atomic.Int32), new(atomic.Int32)
	watch := b.env.Conn(t, "admin")
	for subject, n := range map[string]*atomic.Int32{streams.WorkUnitSubject: single, streams.WorkUnitsSubject: batched} {
		if _, err := watch.Subscribe(subject, func(*nats.Msg) { n.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	return single, batched
}
