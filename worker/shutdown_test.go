package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// TestStopUnderLoadAnswersEveryRequest: a worker stopped with every
// handler slot taken and a burst of requests still queued in its client
// answers every one of them before Run returns (the calls in flight with
// their results, the rest "busy" or "shutting down", which processors retry
// elsewhere), and no handler runs after Run returned. The worker's
// connection closes the moment Run returns, as a command's does, so a
// request answered later would never be answered.
func TestStopUnderLoadAnswersEveryRequest(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	const slots, burst = 4, 20000
	var run testsystem.Stopping
	var late atomic.Int32
	hold := testsystem.NewHold(t, slots)
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("held", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		if run.Returned() {
			late.Add(1)
		}
		hold.Wait()
		if run.Returned() {
			late.Add(1)
		}
		return pipeline.Result{}, nil
	})
	cancel := startStoppable(t, env, mux, worker.Options{Concurrency: slots}, &run, nil)

	nc := env.Conn(t, "processor")
	got := testsystem.Collect(t, nc)
	send := func(i int) {
		data, err := records.Encode(fnReq(uint64(i+1), "held", 0))
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(streams.WorkSubject("held"))
		m.Reply = got.Reply(i)
		m.Data = data
		m.Header.Set(streams.HeaderDeadline, itoa(time.Now().Add(20*time.Second).UnixNano()))
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range slots {
		send(i)
	}
	for range slots {
		<-hold.Started()
	}
	for i := slots; i < slots+burst; i++ {
		send(i)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cancel()
	hold.Release()
	run.Wait(t)

	got.WaitAll(t, slots+burst, "requests")
	for i := range slots + burst {
		m := got.Once(t, "request", i)
		if i >= slots {
			continue
		}
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("call %d in flight at stop: answered %s %s, want its result", i, code, m.Header.Get(micro.ErrorHeader))
		}
		if rep, err := records.Decode[records.WorkReply](m.Data); err != nil || rep.Error != nil {
			t.Fatalf("call %d in flight at stop: %+v, %v", i, rep, err)
		}
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d handler runs started or ended after Run returned", n)
	}
}

// TestStoppingRefusesNewRequests: once Run's context is cancelled, a
// request that arrives while the worker stops (its presence record still
// being deleted, its service still subscribed) is refused "shutting down"
// and starts no handler: a processor tries it elsewhere, and the handlers
// that still run are only those admitted before.
func TestStoppingRefusesNewRequests(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var ran atomic.Int32
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("count", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		ran.Add(1)
		return pipeline.Result{}, nil
	})
	stopping, proceed := make(chan struct{}), make(chan struct{})
	var run testsystem.Stopping
	cancel := startStoppable(t, env, mux, worker.Options{}, &run, func(w *worker.Worker) {
		worker.SetStopping(w, func() {
			close(stopping)
			<-proceed
		})
	})
	nc := env.Conn(t, "processor")
	data, err := records.Encode(fnReq(1, "count", 0))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-stopping
	m, err := nc.Request(streams.WorkSubject("count"), data, 5*time.Second)
	close(proceed)
	run.Wait(t)
	if err != nil {
		t.Fatalf("request while the worker stops: %v", err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != streams.WorkCodeUnavailable {
		t.Fatalf("request while the worker stops: answered %q %q, want %s shutting down", code, m.Header.Get(micro.ErrorHeader), streams.WorkCodeUnavailable)
	}
	if n := ran.Load(); n != 0 {
		t.Fatalf("%d handlers ran for a request that came while the worker stopped", n)
	}
}

// startStoppable runs a worker serving mux under run, after set (when
// given) has seen it, waits until it answers, and returns the cancel that
// stops it.
func startStoppable(t *testing.T, env *testnats.Env, mux *pipeline.ServeMux, opts worker.Options, run *testsystem.Stopping, set func(*worker.Worker)) context.CancelFunc {
	t.Helper()
	wc := env.Conn(t, "worker")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := worker.New(ctx, wc, mux, opts)
	if err != nil {
		t.Fatal(err)
	}
	if set != nil {
		set(w)
	}
	run.Start(ctx, wc, w.Run)
	admin := env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "worker up", func() bool {
		_, err := admin.Request("$SRV.PING.worker", nil, 100*time.Millisecond)
		return err == nil
	})
	return cancel
}
