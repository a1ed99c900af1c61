package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// TestSlotsBusyAnswersPromptly: with its only handler slot taken, a worker
// still answers a completed call from its record at once, and tells a new
// call it is busy before the caller's deadline, instead of queueing both
// behind the slow handler.
func TestSlotsBusyAnswersPromptly(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var quick atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("quick", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload(quick.Add(1))}, nil
	})
	mux.RegisterFunc("held", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		close(started)
		<-release
		return pipeline.Result{}, nil
	})
	serve(t, env, mux, worker.Options{Concurrency: 1})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // before the worker drains, should the test fail early
	nc := env.Conn(t, "processor")

	done := call(t, nc, streams.WorkSubject("quick"), fnReq(1, "quick", 0), time.Second)
	if done.Error != nil {
		t.Fatal(done.Error)
	}
	held := make(chan error, 1)
	go func() {
		_, err := request(nc, streams.WorkSubject("held"), fnReq(2, "held", 0), 10*time.Second)
		held <- err
	}()
	<-started

	start := time.Now()
	again, err := request(nc, streams.WorkSubject("quick"), fnReq(1, "quick", 0), 2*time.Second)
	if err != nil || again.Error != nil || !again.Recorded || string(again.Outputs[0].Data) != string(done.Outputs[0].Data) {
		t.Fatalf("completed call while the slot is taken: %+v, %v", again, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("answered from the record after %s: it waited for the slot", d)
	}
	start = time.Now()
	busy, err := request(nc, streams.WorkSubject("quick"), fnReq(3, "quick", 0), time.Second)
	if err != nil || busy.Error == nil || !busy.Error.Busy {
		t.Fatalf("new call while the slot is taken: %+v, %v", busy, err)
	}
	if d := time.Since(start); d >= time.Second {
		t.Fatalf("busy answered after %s, past the caller's deadline", d)
	}
	free()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// Told busy, it was not attempted: it runs once a slot is free.
	if r := call(t, nc, streams.WorkSubject("quick"), fnReq(3, "quick", 0), time.Second); r.Error != nil || r.Recorded {
		t.Fatalf("call after the slot came free: %+v", r)
	}
	if n := quick.Load(); n != 2 {
		t.Fatalf("quick ran %d times, want 2", n)
	}
}

// TestIdempotencyKeyNamesTheEffect: the key a handler sees is the same on
// every attempt of a function and for its fallback, and differs in a new
// round (an effect that was invalidated and is asked for again).
func TestIdempotencyKeyNamesTheEffect(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var mu sync.Mutex
	var keys []string
	seen := func(c *pipeline.Call) {
		mu.Lock()
		keys = append(keys, c.IdempotencyKey())
		mu.Unlock()
	}
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("charge", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		seen(c)
		if c.Attempt == 1 {
			return pipeline.Result{}, errors.New("declined once")
		}
		return pipeline.Result{}, nil
	})
	mux.RegisterFallback("charge", pipeline.FallbackFunc(func(_ context.Context, c *pipeline.Call, _ pipeline.Failure) (pipeline.Result, error) {
		seen(c)
		return pipeline.Result{}, nil
	}))
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	attempt := func(n, round int) *records.WorkRequest {
		r := fnReq(9, "charge", round)
		r.Attempt = n
		return r
	}
	if r := call(t, nc, streams.WorkSubject("charge"), attempt(1, 0), time.Second); r.Error == nil {
		t.Fatal("attempt 1 should fail")
	}
	if r := call(t, nc, streams.WorkSubject("charge"), attempt(2, 0), time.Second); r.Error != nil {
		t.Fatal(r.Error)
	}
	fb := attempt(2, 0)
	fb.Failure = &pipeline.Failure{BatchID: 9, Failures: 1}
	if r := call(t, nc, streams.FallbackSubject("charge"), fb, time.Second); r.Error != nil {
		t.Fatal(r.Error)
	}
	if r := call(t, nc, streams.WorkSubject("charge"), attempt(3, 1), time.Second); r.Error != nil {
		t.Fatal(r.Error)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"9/0", "9/0", "9/0", "9/0/1"}
	if len(keys) != len(want) {
		t.Fatalf("keys %v, want %v", keys, want)
	}
	for i := range want {
		if keys[i] != want[i] {
			t.Fatalf("keys %v, want %v", keys, want)
		}
	}
}
