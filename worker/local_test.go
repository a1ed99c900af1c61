package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// TestRunUnitsInProcess: a processor of the worker's own process hands it
// units in process (RunUnits). They go through the same unit groups as a
// work.units request: run once, recorded, and answered from the record
// when handed again. The worker declines, running nothing, before Run
// serves, for a type it has no handler for, when it has fewer free slots
// than units, and once it stops.
func TestRunUnitsInProcess(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	mux := countingMux(&runs, nil)
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	mux.RegisterFunc("hold", func(ctx context.Context, _ *pipeline.Call) (pipeline.Result, error) {
		held <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return pipeline.Result{}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := worker.New(ctx, env.Conn(t, "worker"), mux, worker.Options{Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := results(t, env)
	deadline := func() time.Time { return time.Now().Add(5 * time.Second) }
	units := []records.WorkRequest{unitReq(320, "count"), unitReq(321, "count", "count")}

	if _, ok := w.RunUnits(units, deadline()); ok {
		t.Fatal("units taken before Run serves")
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	testnats.Eventually(t, 5*time.Second, "the worker serving in process", func() bool {
		reps, ok := w.RunUnits(units, deadline())
		if !ok {
			return false
		}
		for i, r := range reps {
			if r.Error != nil || !r.Fresh || r.Recorded {
				t.Fatalf("unit %d: %+v", units[i].BatchID, r)
			}
		}
		return true
	})
	g := readGroup(t, kv, 320)
	for _, u := range units {
		if e := g[unitKey(u.BatchID)]; !e.Recorded() {
			t.Fatalf("entry of %d: %+v, want its record", u.BatchID, e)
		}
	}
	reps, ok := w.RunUnits(units, deadline())
	if !ok {
		t.Fatal("the same units again not taken")
	}
	for i, r := range reps {
		if r.Error != nil || !r.Recorded || r.Fresh {
			t.Fatalf("unit %d again: %+v, want answered from its record", units[i].BatchID, r)
		}
	}
	if n1, n2 := runsOf(&runs, 320), runsOf(&runs, 321); n1 != 1 || n2 != 2 {
		t.Fatalf("runs: %d and %d, want 1 and 2 (one call, then two)", n1, n2)
	}

	if _, ok := w.RunUnits([]records.WorkRequest{unitReq(322, "count", "elsewhere")}, deadline()); ok {
		t.Fatal("a unit with a type the worker has no handler for was taken")
	}
	// One of the two slots held: two units do not fit, one does.
	go func() { _, _ = w.RunUnits([]records.WorkRequest{unitReq(323, "hold")}, deadline()) }()
	<-held
	if _, ok := w.RunUnits([]records.WorkRequest{unitReq(324, "count"), unitReq(325, "count")}, deadline()); ok {
		t.Fatal("two units taken with one slot free")
	}
	if _, ok := w.RunUnits([]records.WorkRequest{unitReq(326, "count")}, deadline()); !ok {
		t.Fatal("one unit not taken with one slot free")
	}
	close(release)
	if n := runsOf(&runs, 322) + runsOf(&runs, 324) + runsOf(&runs, 325); n != 0 {
		t.Fatalf("declined units ran %d times", n)
	}

	cancel()
	<-done
	if _, ok := w.RunUnits([]records.WorkRequest{unitReq(327, "count")}, deadline()); ok {
		t.Fatal("units taken after the worker stopped")
	}
	if n := runsOf(&runs, 327); n != 0 {
		t.Fatalf("a unit handed to a stopped worker ran %d times", n)
	}
}
