package authz

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// groupBundle is an authz replica that is not running (a test applies its
// callbacks itself, or runs it) and the batches it recorded.
type groupBundle struct {
	env *testnats.Env
	ctx context.Context
	s   *Service
	ids []uint64
}

func groupSetup(t *testing.T, batches int) *groupBundle {
	t.Helper()
	env := testnats.Start(t, []string{"pay"}, testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second }))
	b := &groupBundle{env: env, ctx: testnats.Context(t, 60*time.Second)}
	b.s = b.replica(t, env.Conn(t, "authz"))
	// Recorded a few at once, as the API would.
	b.ids = make([]uint64, batches)
	var g errgroup.Group
	g.SetLimit(16)
	for i := range b.ids {
		g.Go(func() error {
			rep, err := b.s.intake.submit(b.ctx, &submission{label: "jobs", l: b.s.Table().Labels["jobs"], user: "alice", calls: []api.CallSpec{{Type: "noop"}}, prio: pipeline.Med})
			if err == nil {
				b.ids[i] = rep.ID
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *groupBundle) replica(t *testing.T, nc *nats.Conn) *Service {
	t.Helper()
	table, err := ParseTable([]byte(`labels: {jobs: {domain: pay, users: [alice], mode: non_atomic, priority: med, functions: {noop: {}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(b.ctx, nc, Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// callbacks publishes an Executed callback for each of ids, as a processor.
func (b *groupBundle) callbacks(t *testing.T, ids []uint64) {
	t.Helper()
	js := b.env.JS(t, "processor")
	for _, id := range ids {
		m, err := streams.CallbackMsg(&records.Callback{V: 1, BatchID: id, Domain: "pay", Processor: "p", Outcome: pipeline.ExecutedOutcome(1), Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-b.ctx.Done():
		t.Fatal("callbacks not stored")
	}
}

func (b *groupBundle) record(t *testing.T, kv jetstream.KeyValue, id uint64) (*records.BatchRecord, uint64) {
	t.Helper()
	e, err := kv.Get(b.ctx, streams.BatchKey(id))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := records.Decode[records.BatchRecord](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return &rec, e.Revision()
}

// callbackEvents counts the callbacks applied to rec.
func callbackEvents(rec *records.BatchRecord) int {
	n := 0
	for _, ev := range rec.History {
		if ev.What == "callback" {
			n++
		}
	}
	return n
}

// drained waits until the callbacks consumer has nothing pending or
// unacknowledged.
func (b *groupBundle) drained(t *testing.T) {
	t.Helper()
	js := b.env.JS(t, "admin")
	testnats.Eventually(t, 20*time.Second, "every callback acknowledged", func() bool {
		c, err := js.Consumer(b.ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(b.ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
}

// applyGroup fetches n callbacks through s's consumer and applies them as
// one group, waiting for whatever the group applied alone; it returns the
// batcher, for its counters.
func (b *groupBundle) applyGroup(t *testing.T, s *Service, n int) *callbackBatcher {
	t.Helper()
	var group []jetstream.Msg
	for len(group) < n {
		batch, err := s.applier.consumer.Fetch(n-len(group), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			group = append(group, m)
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
	}
	var gate drain.Gate
	g := s.applier.newCallbackBatcher(&gate)
	var items []*groupItem
	for _, m := range group {
		items = append(items, g.receive(b.ctx, m)...)
	}
	g.apply(b.ctx, items)
	gate.Close()
	gate.Wait()
	return g
}

// TestGroupWriteThatLostItsRaceIsApplied: the callbacks of a group are
// written with compare-and-set on the revision authz created each record
// at; a record changed since (here by admin) makes its write fail, and that
// callback is applied on the record as stored, keeping both changes, while
// the others of the group are written as sent. Each is applied once and
// acknowledged.
func TestGroupWriteThatLostItsRaceIsApplied(t *testing.T) {
	b := groupSetup(t, 8)
	kv, err := b.env.JS(t, "admin").KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	changed := map[uint64]bool{}
	for i, id := range b.ids {
		if i%2 == 1 {
			continue
		}
		rec, rev := b.record(t, kv, id)
		rec.History = append(rec.History, records.Event{At: time.Now().UTC(), What: "note", Detail: "changed by admin"})
		data, err := records.Encode(rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Update(b.ctx, streams.BatchKey(id), data, rev); err != nil {
			t.Fatal(err)
		}
		changed[id] = true
	}
	b.callbacks(t, b.ids)
	g := b.applyGroup(t, b.s, len(b.ids))
	if got, want := g.fellBack.Load(), int64(len(changed)); got != want {
		t.Fatalf("%d writes of the group fell back, want %d (the records changed since)", got, want)
	}
	for _, id := range b.ids {
		rec, _ := b.record(t, kv, id)
		note := false
		for _, ev := range rec.History {
			note = note || ev.What == "note"
		}
		if rec.Status != pipeline.Executed || callbackEvents(rec) != 1 || note != changed[id] {
			t.Fatalf("batch %d: %s with history %+v; want Executed, one callback, the admin's note %v", id, rec.Status, rec.History, changed[id])
		}
	}
	b.drained(t)
}

// TestCallbacksAppliedOnceAcrossAConnectionLoss: a replica that loses its
// connection while it applies groups of callbacks has acknowledged only
// callbacks whose records are stored; the callbacks it left are
// redelivered to the next replica, and in the end each batch has had its
// callback applied exactly once.
func TestCallbacksAppliedOnceAcrossAConnectionLoss(t *testing.T) {
	const n = 600
	b := groupSetup(t, n)
	kv, err := b.env.JS(t, "admin").KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	// The first replica's connection is its own, to be dropped.
	nc := b.env.Conn(t, "authz")
	first := b.replica(t, nc)
	// It remembers the records the bundle's replica created, as if it had.
	for _, id := range b.ids {
		b.s.store.recent.mu.Lock()
		rr, ok := b.s.store.recent.m[id]
		b.s.store.recent.mu.Unlock()
		if ok {
			first.store.recent.put(id, &submit.Created{Data: rr.data, Rev: rr.rev})
		}
	}
	b.callbacks(t, b.ids)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- first.Run(ctx) }()
	js := b.env.JS(t, "admin")
	c, err := js.Consumer(b.ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
	if err != nil {
		t.Fatal(err)
	}
	unackedNow := func() int {
		info, err := c.Info(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return int(info.NumPending) + info.NumAckPending
	}
	// Dropped midway: half of them acknowledged, with
	// groups on their way.
	testnats.Eventually(t, 10*time.Second, "callbacks applied", func() bool { return unackedNow() <= n/2 })
	nc.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// Whatever the consumer still holds was not acknowledged; every other
	// callback was, and its record must say so.
	// The consumer's count may run ahead of the distinct callbacks it
	// redelivers (a message handed to the lost connection counted again):
	// fetching stops too once three fetches in a row bring no new batch.
	left := map[uint64]bool{}
	unacked := unackedNow()
	for stale := 0; len(left) < unacked && stale < 3; {
		batch, err := c.Fetch(unacked-len(left), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		before, got := len(left), 0
		for m := range batch.Messages() {
			cbs, _, err := records.DecodeCallbacks(m.Data())
			if err != nil {
				t.Fatal(err)
			}
			for _, cb := range cbs {
				left[cb.BatchID] = true
			}
			got++
		}
		if got == 0 {
			t.Fatalf("%d callbacks unacknowledged, %d redelivered", unacked, len(left))
		}
		if len(left) == before {
			stale++
		} else {
			stale = 0
		}
	}
	if len(left) < unacked {
		t.Logf("the consumer counted %d unacknowledged; %d distinct callbacks came back", unacked, len(left))
	}
	written := 0 // stored but not acknowledged: redelivered onto a terminal record
	for _, id := range b.ids {
		rec, _ := b.record(t, kv, id)
		switch {
		case !left[id] && !rec.Status.Terminal():
			t.Fatalf("the callback of batch %d was acknowledged, but its record is %s", id, rec.Status)
		case left[id] && rec.Status.Terminal():
			written++
		}
	}
	t.Logf("%d of %d callbacks left unacknowledged by the replica that lost its connection, %d of them written", len(left), n, written)
	second := b.replica(t, b.env.Conn(t, "authz"))
	ctx2, cancel2 := context.WithCancel(b.ctx)
	done2 := make(chan error, 1)
	go func() { done2 <- second.Run(ctx2) }()
	defer func() {
		cancel2()
		if err := <-done2; err != nil {
			t.Error(err)
		}
	}()
	b.drained(t)
	for _, id := range b.ids {
		if rec, _ := b.record(t, kv, id); rec.Status != pipeline.Executed || callbackEvents(rec) != 1 {
			t.Fatalf("batch %d: %s with history %+v; want Executed with one callback", id, rec.Status, rec.History)
		}
	}
}

// TestGroupReadsRecordsItDidNotCreate: a replica applying callbacks for
// records it does not remember (created by another replica, or forgotten
// behind a large backlog) reads them together and writes them as a group;
// an owner's change made before the callback is kept, a batch whose record
// is gone and a callback applied before go the patient way, and each
// callback is applied once and acknowledged.
func TestGroupReadsRecordsItDidNotCreate(t *testing.T) {
	b := groupSetup(t, 10)
	kv, err := b.env.JS(t, "admin").KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	other := b.replica(t, b.env.Conn(t, "authz"))
	noted, gone := b.ids[0], b.ids[1]
	rec, rev := b.record(t, kv, noted)
	rec.History = append(rec.History, records.Event{At: time.Now().UTC(), What: "note", Detail: "changed by admin"})
	data, err := records.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(b.ctx, streams.BatchKey(noted), data, rev); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(b.ctx, streams.BatchKey(gone)); err != nil {
		t.Fatal(err)
	}
	// The last batch's callback comes twice: the second finds it terminal.
	repeated := b.ids[len(b.ids)-1]
	b.callbacks(t, append(slices.Clone(b.ids), repeated))
	g := b.applyGroup(t, other, len(b.ids)+1)
	// Every record found is read before any is written: the repeated
	// callback's write loses its race to the first and is applied alone,
	// on the record as stored (terminal by then: it writes nothing).
	if got, want := g.readFirst.Load(), int64(len(b.ids)); got != want {
		t.Fatalf("%d writes of the group were sent after a grouped read, want %d", got, want)
	}
	if got := g.fellBack.Load(); got != 1 {
		t.Fatalf("%d writes of the group fell back, want the repeated callback's", got)
	}
	for _, id := range b.ids {
		if id == gone {
			if _, err := kv.Get(b.ctx, streams.BatchKey(id)); !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("batch %d: the deleted record came back (%v)", id, err)
			}
			continue
		}
		rec, _ := b.record(t, kv, id)
		note := false
		for _, ev := range rec.History {
			note = note || ev.What == "note"
		}
		if rec.Status != pipeline.Executed || callbackEvents(rec) != 1 || note != (id == noted) {
			t.Fatalf("batch %d: %s with history %+v; want Executed, one callback, the admin's note %v", id, rec.Status, rec.History, id == noted)
		}
	}
	b.drained(t)
}

// TestCallbackGroups: a replica applies two groups of callbacks at once,
// more on a machine with many cores; one applying a single group at a
// time, of four callbacks, still applies each of many once.
func TestCallbackGroups(t *testing.T) {
	b := groupSetup(t, 40)
	if got, want := b.s.applier.groups, max(2, runtime.GOMAXPROCS(0)/4); got != want {
		t.Fatalf("callback groups %d, want %d on %d cores", got, want, runtime.GOMAXPROCS(0))
	}
	one, err := New(b.ctx, b.env.Conn(t, "authz"), Options{Table: b.s.Table(), Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	one.applier.groups = 1
	b.callbacks(t, b.ids)
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- one.Run(ctx) }()
	b.drained(t)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	kv, err := b.env.JS(t, "admin").KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range b.ids {
		rec, _ := b.record(t, kv, id)
		if rec.Status != pipeline.Executed || callbackEvents(rec) != 1 {
			t.Fatalf("batch %d: %s, applied %d times; want Executed, once", id, rec.Status, callbackEvents(rec))
		}
	}
}
