package processor_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// TestStopUnderLoadAnswersEveryTick: a processor stopped while a tick's
// steps are running and a burst of ticks waits in its client finishes the
// tick in progress (its steps executed, not abandoned), answers every
// queued tick "503 shutting down" before Run returns, and runs no step
// after Run returned. The processor's connection closes the moment Run
// returns, as a command's does, so a tick answered later would never be.
func TestStopUnderLoadAnswersEveryTick(t *testing.T) {
	b := setup(t)
	const inFlight, burst = 4, 200
	var run testsystem.Stopping
	var late atomic.Int32
	hold := testsystem.NewHold(t, 64)
	b.mux.RegisterFunc("held", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		if run.Returned() {
			late.Add(1)
		}
		hold.Wait()
		return pipeline.Result{}, nil
	})
	b.startWorkerWith(t, b.ctx, worker.Options{})
	for range 2 * inFlight {
		b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{{Type: "held"}}})
	}
	pc := b.env.Conn(t, "processor")
	ctx, cancel := context.WithCancel(b.ctx)
	t.Cleanup(cancel)
	p, err := processor.New(ctx, pc, processor.Options{Domain: domain, Concurrency: inFlight, WorkTimeout: 20 * time.Second, Pace: processor.PaceTick})
	if err != nil {
		t.Fatal(err)
	}
	run.Start(ctx, pc, p.Run)

	nc := b.env.Conn(t, "ticker")
	answers := testsystem.Collect(t, nc)
	tick := func(i, steps int) {
		if err := nc.PublishRequest(streams.TickSubject(domain), answers.Reply(i), []byte(strconv.Itoa(steps))); err != nil {
			t.Fatal(err)
		}
	}
	// The first tick's steps hold their worker calls; ticks sent until one
	// of them started find the queue too new, and are answered at once.
	first := 0
	testnats.Eventually(t, 10*time.Second, "a step in flight", func() bool {
		select {
		case <-hold.Started():
			return true
		default:
		}
		first++
		tick(first, inFlight)
		_ = nc.Flush()
		return false
	})
	for i := first + 1; i <= first+burst; i++ {
		tick(i, 1)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cancel()
	hold.Release()
	run.Wait(t)

	// Tick 0 was never sent: the ticks are 1 to first+burst.
	answers.WaitAll(t, first+burst, "ticks")
	executed := 0
	for i := 1; i <= first+burst; i++ {
		m := answers.Once(t, "tick", i)
		if testsystem.Refused(t, "tick", i, m) {
			continue
		}
		var rep api.TickReport
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatalf("tick %d: %s: %v", i, m.Data, err)
		}
		for _, s := range rep.Steps {
			if s.Outcome != "Executed" {
				t.Fatalf("tick %d: step %+v, want every step taken to finish Executed", i, s)
			}
			executed++
		}
	}
	if executed == 0 {
		t.Fatal("no step executed: the tick in flight at stop was abandoned")
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d steps called a worker after Run returned", n)
	}
}

// TestWorkerShuttingDownIsBusy: a worker that answers "503 shutting down"
// (a request that reached it as it stopped) did not attempt the call: the
// step is busy, tried again later, and the batch, with no retry budget at
// all, ends Executed once a worker runs it.
func TestWorkerShuttingDownIsBusy(t *testing.T) {
	b := setup(t)
	wc := b.env.Conn(t, "worker")
	stopping, err := wc.QueueSubscribe(streams.WorkSubject("later"), streams.WorkQueueGroup, func(m *nats.Msg) {
		_ = streams.Reply(wc, m.Reply, nil, "503", "worker: shutting down")
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	p := b.processor(t, processor.Options{})
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions: []pipeline.Function{{Type: "later"}}})
	if s := step(t, b.ctx, p); s.Action != api.ActionBusy {
		t.Fatalf("step against a stopping worker: %+v, want busy", s)
	}
	if err := stopping.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	b.mux.RegisterFunc("later", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
	b.startWorkerWith(t, b.ctx, worker.Options{})
	if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Executed || cb.Attempts != 1 {
		t.Fatalf("callback %+v, want Executed after one attempt", cb)
	}
}
