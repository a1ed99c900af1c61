package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// callUnits sends several units in one request, as a processor's wave does.
func callUnits(t *testing.T, nc *nats.Conn, units []records.WorkRequest, deadline time.Duration) []records.WorkReply {
	t.Helper()
	data, err := records.Encode(&records.WorkBatch{Units: units})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(streams.WorkUnitsSubject)
	m.Data = data
	m.Header.Set(streams.HeaderDeadline, itoa(time.Now().Add(deadline).UnixNano()))
	resp, err := nc.RequestMsg(m, deadline+2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := records.Decode[records.WorkBatchReply](resp.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Replies) != len(units) {
		t.Fatalf("%d replies for %d units", len(rep.Replies), len(units))
	}
	return rep.Replies
}

func unitReq(id uint64, types ...string) records.WorkRequest {
	r := records.WorkRequest{BatchID: id, Domain: "pay", Attempt: 1, Unit: true}
	for i, typ := range types {
		r.Calls = append(r.Calls, records.WorkCall{Index: i, Type: typ})
	}
	return r
}

// TestUnitsInOneRequestKeepTheirClaims: several units in one request are
// each claimed, run and recorded as a unit request alone would be: in
// order, a failure released (so it runs again), a success answered from
// its record when asked again — alone or in another batch — and a unit
// whose claim another call holds is told busy without running.
func TestUnitsInOneRequestKeepTheirClaims(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("count", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		runs.Add(1)
		return pipeline.Result{Data: pipeline.MustPayload(c.BatchID)}, nil
	})
	mux.RegisterFunc("fail", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		runs.Add(1)
		return pipeline.Result{}, errors.New("no")
	})
	mux.RegisterFunc("held", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		started <- struct{}{}
		<-release
		return pipeline.Result{}, nil
	})
	serve(t, env, mux, worker.Options{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the worker's stop, which waits for the handler
	nc := env.Conn(t, "processor")

	// Unit 9 runs alone and holds its claim meanwhile.
	held := make(chan *records.WorkReply, 1)
	go func() { r := unitReq(9, "held"); held <- call(t, nc, streams.WorkUnitSubject, &r, 5*time.Second) }()
	<-started

	first := callUnits(t, nc, []records.WorkRequest{unitReq(1, "count"), unitReq(2, "fail"), unitReq(3, "count", "count"), unitReq(9, "held")}, 3*time.Second)
	if r := first[0]; r.Error != nil || r.Recorded || !r.Fresh || string(r.Outputs[0].Data) != string(pipeline.MustPayload(uint64(1))) {
		t.Fatalf("unit 1: %+v", r)
	}
	if r := first[1]; r.Error == nil || r.Error.Busy || r.Fresh {
		t.Fatalf("unit 2: %+v, want its failure", r)
	}
	if r := first[2]; r.Error != nil || len(r.Outputs) != 2 || !r.Fresh {
		t.Fatalf("unit 3: %+v", r)
	}
	if r := first[3]; r.Error == nil || !r.Error.Busy {
		t.Fatalf("unit 9, held by another call: %+v, want busy", r)
	}
	if runs.Load() != 4 {
		t.Fatalf("handlers ran %d times, want 4", runs.Load())
	}
	unblock()
	if r := <-held; r.Error != nil {
		t.Fatalf("unit 9 alone: %+v", r)
	}

	// Asked again: the successes are answered from their records, the
	// failure runs again.
	again := callUnits(t, nc, []records.WorkRequest{unitReq(3, "count", "count"), unitReq(1, "count"), unitReq(2, "fail")}, 3*time.Second)
	if r := again[0]; r.Error != nil || !r.Recorded || r.Fresh || len(r.Outputs) != 2 {
		t.Fatalf("unit 3 again: %+v", r)
	}
	if r := again[1]; r.Error != nil || !r.Recorded || r.Fresh {
		t.Fatalf("unit 1 again: %+v", r)
	}
	if r := again[2]; r.Error == nil || r.Error.Busy {
		t.Fatalf("unit 2 again: %+v", r)
	}
	if runs.Load() != 5 {
		t.Fatalf("handlers ran %d times, want 5 (only the failed unit again)", runs.Load())
	}
	r1 := unitReq(1, "count")
	if r := call(t, nc, streams.WorkUnitSubject, &r1, time.Second); r.Error != nil || !r.Recorded {
		t.Fatalf("unit 1 alone: %+v", r)
	}
}

// TestUnitsWaitForASlot: units beyond the free handler slots wait for one
// at most half the caller's time, then are told busy (not attempted), and
// their claims are released.
func TestUnitsWaitForASlot(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	release := make(chan struct{})
	var runs atomic.Int32
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("held", func(ctx context.Context, _ *pipeline.Call) (pipeline.Result, error) {
		runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return pipeline.Result{}, nil
	})
	serve(t, env, mux, worker.Options{Concurrency: 1})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	nc := env.Conn(t, "processor")
	reps := callUnits(t, nc, []records.WorkRequest{unitReq(1, "held"), unitReq(2, "held")}, 600*time.Millisecond)
	busy := 0
	for _, r := range reps {
		if r.Error != nil && r.Error.Busy {
			busy++
		}
	}
	if busy != 1 || runs.Load() != 1 {
		t.Fatalf("replies %+v after %d runs: want one busy, one run", reps, runs.Load())
	}
	unblock()
	// The busy unit's claim was released: it runs now.
	again := callUnits(t, nc, []records.WorkRequest{unitReq(1, "held"), unitReq(2, "held")}, 3*time.Second)
	for i, r := range again {
		if r.Error != nil {
			t.Fatalf("unit %d again: %+v", i+1, r)
		}
	}
	if runs.Load() != 2 {
		t.Fatalf("handlers ran %d times, want 2", runs.Load())
	}
}
