package worker_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// serve runs a worker over mux until the test ends.
func serve(t *testing.T, env *testnats.Env, mux *pipeline.ServeMux, opts worker.Options) {
	t.Helper()
	serveOn(t, env.Conn(t, "worker"), env.Conn(t, "admin"), mux, opts)
}

// serveOn runs a worker over mux on nc until the test ends, and waits until
// admin sees it.
func serveOn(t *testing.T, nc, admin *nats.Conn, mux *pipeline.ServeMux, opts worker.Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := worker.New(ctx, nc, mux, opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	testnats.Eventually(t, 5*time.Second, "worker up", func() bool {
		_, err := admin.Request("$SRV.PING.worker", nil, 100*time.Millisecond)
		return err == nil
	})
}

// call sends a work request as the processor would.
func call(t *testing.T, nc *nats.Conn, subject string, req *records.WorkRequest, deadline time.Duration) *records.WorkReply {
	t.Helper()
	data, err := records.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(streams.HeaderDeadline, itoa(time.Now().Add(deadline).UnixNano()))
	resp, err := nc.RequestMsg(m, deadline+2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := records.Decode[records.WorkReply](resp.Data)
	if err != nil {
		t.Fatal(err)
	}
	return &rep
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func jetstreamFor(nc *nats.Conn) (jetstream.JetStream, error) { return jetstream.New(nc) }

func fnReq(id uint64, typ string, round int) *records.WorkRequest {
	return &records.WorkRequest{BatchID: id, Domain: "pay", Attempt: round + 1, Round: round,
		Calls: []records.WorkCall{{Index: 0, Type: typ}}}
}

func TestCompletionRecordAnswersRepeats(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs atomic.Int32
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("count", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload(runs.Add(1))}, nil
	})
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	first := call(t, nc, streams.WorkSubject("count"), fnReq(1, "count", 0), time.Second)
	again := call(t, nc, streams.WorkSubject("count"), fnReq(1, "count", 0), time.Second)
	if first.Error != nil || again.Error != nil || !again.Recorded || first.Recorded {
		t.Fatalf("first %+v again %+v", first, again)
	}
	// Only the first run under a key nobody held before is fresh.
	if !first.Fresh || again.Fresh {
		t.Fatalf("fresh: first %v again %v, want true false", first.Fresh, again.Fresh)
	}
	if runs.Load() != 1 || string(again.Outputs[0].Data) != string(first.Outputs[0].Data) {
		t.Fatalf("handler ran %d times; outputs %v %v", runs.Load(), first.Outputs, again.Outputs)
	}
	// A new round (after a failed confirmation) runs it again on purpose.
	if r := call(t, nc, streams.WorkSubject("count"), fnReq(1, "count", 1), time.Second); r.Recorded || runs.Load() != 2 {
		t.Fatalf("new round: %+v, runs %d", r, runs.Load())
	}
}

func TestDeadlineAndClassification(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("slow", func(ctx context.Context, _ *pipeline.Call) (pipeline.Result, error) {
		<-ctx.Done() // honours the caller's deadline
		return pipeline.Result{}, ctx.Err()
	})
	mux.RegisterFunc("panics", func(context.Context, *pipeline.Call) (pipeline.Result, error) { panic("boom") })
	mux.RegisterFunc("coded", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, pipeline.WithCode("card_declined", errors.New("declined"))
	})
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	start := time.Now()
	r := call(t, nc, streams.WorkSubject("slow"), fnReq(1, "slow", 0), 300*time.Millisecond)
	if r.Error == nil || !r.Error.Retryable || time.Since(start) > 2*time.Second {
		t.Fatalf("slow: %+v after %s", r.Error, time.Since(start))
	}
	if r := call(t, nc, streams.WorkSubject("panics"), fnReq(2, "panics", 0), time.Second); r.Error == nil || !r.Error.Permanent || r.Error.Retryable {
		t.Fatalf("panic: %+v", r.Error)
	}
	req := fnReq(3, "coded", 0)
	req.Retry = &pipeline.RetryLogic{Times: 3, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(time.Second)}, NonRetryable: []string{"card_declined"}}
	if r := call(t, nc, streams.WorkSubject("coded"), req, time.Second); r.Error == nil || r.Error.Retryable || len(r.Error.Codes) != 1 {
		t.Fatalf("coded: %+v", r.Error)
	}
	// An unknown type in a unit fails permanently, naming it.
	unit := &records.WorkRequest{BatchID: 4, Domain: "pay", Unit: true, Calls: []records.WorkCall{{Index: 0, Type: "nope"}}}
	if r := call(t, nc, streams.WorkUnitSubject, unit, time.Second); r.Error == nil || !r.Error.Permanent {
		t.Fatalf("unknown type: %+v", r.Error)
	}
}

// TestUnitRollbackHooks: the unit's shared rollback hooks run, last first,
// when a later function fails; commit hooks only on success.
func TestUnitRollbackHooks(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var mu sync.Mutex
	var log []string
	record := func(s string) { mu.Lock(); log = append(log, s); mu.Unlock() }
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("step", func(ctx context.Context, c *pipeline.Call) (pipeline.Result, error) {
		u := pipeline.UnitFrom(ctx)
		name := itoa(int64(c.Index + 1))
		u.OnRollback(func(context.Context) error { record("undo" + name); return nil })
		u.OnCommit(func(context.Context) error { record("commit" + name); return nil })
		return pipeline.Result{}, nil
	})
	mux.RegisterFunc("fail", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, errors.New("no")
	})
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	bad := &records.WorkRequest{BatchID: 1, Domain: "pay", Unit: true, Calls: []records.WorkCall{{Index: 0, Type: "step"}, {Index: 1, Type: "step"}, {Index: 2, Type: "fail"}}}
	if r := call(t, nc, streams.WorkUnitSubject, bad, time.Second); r.Error == nil || r.Error.Index != 2 {
		t.Fatalf("failing unit: %+v", r)
	}
	mu.Lock()
	got := append([]string(nil), log...)
	log = nil
	mu.Unlock()
	if len(got) != 2 || got[0] != "undo2" || got[1] != "undo1" {
		t.Fatalf("rollback order %v, want [undo2 undo1]", got)
	}
	good := &records.WorkRequest{BatchID: 2, Domain: "pay", Unit: true, Calls: []records.WorkCall{{Index: 0, Type: "step"}, {Index: 1, Type: "step"}}}
	if r := call(t, nc, streams.WorkUnitSubject, good, time.Second); r.Error != nil || len(r.Outputs) != 2 {
		t.Fatalf("unit: %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(log) != 2 || log[0] != "commit1" || log[1] != "commit2" {
		t.Fatalf("commit order %v", log)
	}
}

// TestScaleOut: two workers in the queue group share the calls.
func TestScaleOut(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var a, b atomic.Int32
	for _, n := range []*atomic.Int32{&a, &b} {
		mux := pipeline.NewServeMux()
		mux.RegisterFunc("work", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
			n.Add(1)
			return pipeline.Result{}, nil
		})
		serve(t, env, mux, worker.Options{})
	}
	nc := env.Conn(t, "processor")
	for i := range 200 {
		if r := call(t, nc, streams.WorkSubject("work"), fnReq(uint64(i+1), "work", 0), time.Second); r.Error != nil {
			t.Fatal(r.Error)
		}
	}
	if a.Load()+b.Load() != 200 || a.Load() == 0 || b.Load() == 0 {
		t.Fatalf("calls split %d/%d", a.Load(), b.Load())
	}
}

func TestNewRefusesAnEmptyMux(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	if _, err := worker.New(context.Background(), env.Conn(t, "worker"), pipeline.NewServeMux(), worker.Options{}); err == nil {
		t.Fatal("want an error for a mux without handlers")
	}
}

// TestConcurrentCallsRunOnce: while a call runs, the same call elsewhere is
// told it is busy instead of running the handler a second time.
func TestConcurrentCallsRunOnce(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	var runs atomic.Int32
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("held", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		runs.Add(1)
		started <- struct{}{}
		<-release
		return pipeline.Result{Data: pipeline.MustPayload("done")}, nil
	})
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	first := make(chan *records.WorkReply, 1)
	go func() { first <- call(t, nc, streams.WorkSubject("held"), fnReq(7, "held", 0), 5*time.Second) }()
	<-started
	if r := call(t, nc, streams.WorkSubject("held"), fnReq(7, "held", 0), time.Second); r.Error == nil || !r.Error.Busy {
		t.Fatalf("a concurrent call: %+v", r)
	}
	close(release)
	if r := <-first; r.Error != nil || r.Recorded {
		t.Fatalf("first call: %+v", r)
	}
	if r := call(t, nc, streams.WorkSubject("held"), fnReq(7, "held", 0), time.Second); r.Error != nil || !r.Recorded {
		t.Fatalf("a later call: %+v", r)
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times", runs.Load())
	}
}
