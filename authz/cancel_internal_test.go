package authz

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// cancelBundle is an authz replica that applies no callback until run
// starts it (so a test orders the applications itself), a processor driven
// by ticks and a worker counting the calls of each batch.
type cancelBundle struct {
	env   *testnats.Env
	ctx   context.Context
	s     *Service
	proc  *processor.Processor
	mu    sync.Mutex
	calls map[uint64]int
}

func cancelSetup(t *testing.T) *cancelBundle {
	t.Helper()
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 30*time.Second)
	table, err := ParseTable([]byte(`labels: {seq: {domain: pay, users: [alice], mode: atomic, priority: med, functions: {noop: {}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	b := &cancelBundle{env: env, ctx: ctx, calls: map[uint64]int{}}
	if b.s, err = New(ctx, env.Conn(t, "authz"), Options{Table: table}); err != nil {
		t.Fatal(err)
	}
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("noop", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.calls[c.BatchID]++
		return pipeline.Result{}, nil
	})
	w, err := worker.New(ctx, env.Conn(t, "worker"), mux, worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); testnats.Stopped(t, "worker", wdone) })
	if b.proc, err = processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: "pay"}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *cancelBundle) send(t *testing.T, key string) uint64 {
	t.Helper()
	rep, err := b.s.intake.submit(b.ctx, &submission{label: "seq", l: b.s.Table().Labels["seq"], user: "alice", calls: []api.CallSpec{{Type: "noop"}}, key: key, prio: pipeline.Med})
	if err != nil {
		t.Fatal(err)
	}
	return rep.ID
}

func (b *cancelBundle) ran(id uint64) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[id]
}

// tickUntil ticks until batch id ran, failing the test if batch never
// does meanwhile.
func (b *cancelBundle) tickUntil(t *testing.T, id, never uint64) {
	t.Helper()
	testnats.Eventually(t, 10*time.Second, "the batch runs", func() bool {
		b.proc.Tick(b.ctx, 4)
		if b.ran(never) != 0 {
			t.Fatalf("cancelled batch %d ran", never)
		}
		return b.ran(id) != 0
	})
}

// run starts applying callbacks.
func (b *cancelBundle) run(t *testing.T) {
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.s.Run(ctx) }()
	t.Cleanup(func() { cancel(); testnats.Stopped(t, "authz", done) })
}

func (b *cancelBundle) waitStatus(t *testing.T, id uint64, want pipeline.Status) *records.BatchRecord {
	t.Helper()
	var rec *records.BatchRecord
	testnats.Eventually(t, 10*time.Second, "batch recorded "+string(want), func() bool {
		var err error
		rec, err = b.s.store.record(b.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Status == want
	})
	return rec
}

// TestCancelWhileWaitingForKey: a batch cancelled while it waits behind its
// key's head, the head released before the cancelled batch's callback is
// applied: the cancelled batch gets no token and never runs, and the key
// moves on to the batch after it.
func TestCancelWhileWaitingForKey(t *testing.T) {
	b := cancelSetup(t)
	head, cancelled, next := b.send(t, "k"), b.send(t, "k"), b.send(t, "k")
	if _, err := b.s.removal.cancel(b.ctx, "alice", &api.IDRequest{ID: cancelled}); err != nil {
		t.Fatal(err)
	}
	b.tickUntil(t, head, cancelled)
	// The head's callback is applied before the cancelled batch's.
	if err := b.s.Apply(b.ctx, &records.Callback{BatchID: head, Domain: "pay", Priority: pipeline.Med,
		Outcome: pipeline.ExecutedOutcome(1), Attempts: 1, Processor: "test"}); err != nil {
		t.Fatal(err)
	}
	b.tickUntil(t, next, cancelled)
	b.run(t)
	b.waitStatus(t, next, pipeline.Executed)
	if rec := b.waitStatus(t, cancelled, pipeline.RemovedByOwner); rec.Outcome.Reason != "cancelled by alice" {
		t.Fatalf("cancelled batch: %+v", rec.Outcome)
	}
	testnats.Eventually(t, 5*time.Second, "the key's order emptied", func() bool {
		q, err := b.s.keyOrders.order.Load(b.ctx, "pay", "k")
		return err == nil && q.Head() == 0
	})
	if n := b.ran(cancelled); n != 0 {
		t.Fatalf("cancelled batch ran %d times", n)
	}
}

// TestCancelRepeatedFinishesACutShortCancel: a cancel wrote its batch's
// progress Done and was cut short before the callback (a batch waiting
// behind its key's head: no token carries it). Its repeat answers as the
// first would have, publishes the callback, and the record follows; the
// key then moves on without running it.
func TestCancelRepeatedFinishesACutShortCancel(t *testing.T) {
	b := cancelSetup(t)
	b.run(t)
	head, cancelled, next := b.send(t, "k"), b.send(t, "k"), b.send(t, "k")
	rec, err := b.s.store.record(b.ctx, cancelled)
	if err != nil {
		t.Fatal(err)
	}
	st, err := b.s.store.progress.Load(b.ctx, "pay", cancelled)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.s.removal.markRemoved(b.ctx, &rec.Batch, st, "cancelled by alice"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rep, err := b.s.removal.cancel(b.ctx, "alice", &api.IDRequest{ID: cancelled})
		if err != nil {
			t.Fatalf("repeated cancel: %v", err)
		}
		if r := rep.(*api.CancelReply); r.ID != cancelled || r.Status != pipeline.RemovedByOwner {
			t.Fatalf("repeated cancel: %+v", r)
		}
		b.waitStatus(t, cancelled, pipeline.RemovedByOwner)
	}
	b.tickUntil(t, head, cancelled)
	b.tickUntil(t, next, cancelled)
	b.waitStatus(t, next, pipeline.Executed)
}
