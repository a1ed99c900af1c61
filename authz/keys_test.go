package authz_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

const keyedTable = `
domains:
  pay:
    allowed_types: [seq.step, seq.fail, seq.wait]
labels:
  seq:
    domain: pay
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      seq.step: {}
      seq.fail: {retry: {times: 1000, backoff: {kind: fixed, initial: 20ms}}}
      seq.wait: {confirm: {timeout: 1m, by: [oracle]}}
  seqhigh:
    domain: pay
    users: [alice]
    mode: atomic
    priority: high
    functions:
      seq.step: {}
`

// span is one call a handler ran: when it started and ended.
type span struct {
	key        string
	batch      uint64
	index      int
	start, end time.Time
}

// recorder keeps every call's span, and counts calls of one key running
// at once.
type recorder struct {
	mu       sync.Mutex
	spans    []span
	inflight map[string]int
	overlaps []string
}

func (r *recorder) run(c *pipeline.Call, work func() error) error {
	sp := span{key: c.Key, batch: c.BatchID, index: c.Index, start: time.Now()}
	r.mu.Lock()
	if c.Key != "" {
		r.inflight[c.Key]++
		if r.inflight[c.Key] > 1 {
			r.overlaps = append(r.overlaps, fmt.Sprintf("key %s: batch %d function %d started beside another call", c.Key, c.BatchID, c.Index))
		}
	}
	r.mu.Unlock()
	err := work()
	sp.end = time.Now()
	r.mu.Lock()
	if c.Key != "" {
		r.inflight[c.Key]--
	}
	r.spans = append(r.spans, sp)
	r.mu.Unlock()
	return err
}

func (r *recorder) all() []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.spans)
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

func (r *recorder) ran(id uint64) bool {
	for _, sp := range r.all() {
		if sp.batch == id {
			return true
		}
	}
	return false
}

// keyedBundle runs authz with keyedTable, a worker whose handlers record
// their calls, and processor replicas driven by ticks.
type keyedBundle struct {
	*bundle
	procs []*processor.Processor
	rec   *recorder
	// failing makes seq.fail fail with a retryable error; cleared, it
	// fails permanently.
	failing  atomic.Bool
	attempts atomic.Int32
	// table is the authorization table authz runs with.
	table string
}

func keyedSetup(t *testing.T, replicas int) *keyedBundle {
	t.Helper()
	return keyedSetupWith(t, replicas, keyedTable)
}

// keyedSetupWith is keyedSetup with authz running table.
func keyedSetupWith(t *testing.T, replicas int, table string) *keyedBundle {
	t.Helper()
	b := &keyedBundle{bundle: &bundle{}, rec: &recorder{inflight: map[string]int{}}, table: table}
	b.failing.Store(true)
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("seq.step", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		// A moment of work, so that calls running together overlap.
		return pipeline.Result{}, b.rec.run(c, func() error { time.Sleep(2 * time.Millisecond); return nil })
	})
	mux.RegisterFunc("seq.fail", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, b.rec.run(c, func() error {
			b.attempts.Add(1)
			if b.failing.Load() {
				return errors.New("not yet")
			}
			return pipeline.Permanent(errors.New("given up"))
		})
	})
	mux.RegisterFunc("seq.wait", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, b.rec.run(c, func() error { return nil })
	})
	b.start(t, table, mux, nil)
	for i := range replicas {
		b.procs = append(b.procs, b.Processor(t, processor.Options{Name: fmt.Sprintf("p%d", i), Concurrency: 8}))
	}
	return b
}

func (b *keyedBundle) startKeyedAuthz(t *testing.T) {
	t.Helper()
	table, err := authz.ParseTable([]byte(b.table))
	if err != nil {
		t.Fatal(err)
	}
	b.runAuthz(t, authz.Options{Table: table})
}

// drive ticks every replica over and over until the returned stop.
func (b *keyedBundle) drive(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	for _, p := range b.procs {
		wg.Go(func() {
			idle := time.NewTicker(5 * time.Millisecond)
			defer idle.Stop()
			for ctx.Err() == nil {
				if rep := p.Tick(ctx, 16); rep.Status == api.TickOK {
					continue
				}
				select {
				case <-ctx.Done():
				case <-idle.C:
				}
			}
		})
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

func (b *keyedBundle) sendKeyed(t *testing.T, label, key string, types ...string) uint64 {
	t.Helper()
	calls := make([]api.CallSpec, len(types))
	for i, typ := range types {
		calls[i] = api.CallSpec{Type: typ}
		if typ == "seq.wait" {
			calls[i].Expect = "included"
		}
	}
	var rep api.SendReply
	if e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: label, Key: key, Functions: calls}, &rep); e != nil {
		t.Fatalf("send: %+v", e)
	}
	return rep.ID
}

func (b *keyedBundle) status(t *testing.T, id uint64) pipeline.Status {
	return b.record(t, id).Status
}

func (b *keyedBundle) waitStatus(t *testing.T, want pipeline.Status, ids ...uint64) {
	t.Helper()
	testnats.Eventually(t, 20*time.Second, fmt.Sprintf("batches %v %s", ids, want), func() bool {
		for _, id := range ids {
			if b.status(t, id) != want {
				return false
			}
		}
		return true
	})
}

func (b *keyedBundle) keys(t *testing.T) map[string]api.KeyState {
	t.Helper()
	var rep api.KeysReply
	if e := b.call(t, "owner", api.OpKeys, api.KeysRequest{Domain: domain}, &rep); e != nil {
		t.Fatalf("keys: %+v", e)
	}
	out := map[string]api.KeyState{}
	for _, k := range rep.Keys {
		out[k.Key] = k
	}
	return out
}

// TestKeyOrderAcrossReplicas: batches of five keys, submitted interleaved
// with unkeyed ones and across both priorities, run under three processor
// replicas: no two calls of one key ever overlap, each key's batches run
// one after the other in submission order, and every batch executes.
func TestKeyOrderAcrossReplicas(t *testing.T) {
	b := keyedSetup(t, 3)
	keys := []string{"k0", "k1", "k2", "zk/app+1", "k4"}
	submitted := map[string][]uint64{}
	var all []uint64
	for i := range 6 {
		for _, k := range keys {
			var id uint64
			if i%3 == 2 {
				id = b.sendKeyed(t, "seqhigh", k, "seq.step") // a high batch still waits its turn
			} else {
				id = b.sendKeyed(t, "seq", k, "seq.step", "seq.step")
			}
			submitted[k] = append(submitted[k], id)
			all = append(all, id)
		}
		all = append(all, b.sendKeyed(t, "seq", "", "seq.step", "seq.step"))
	}
	if got := b.keys(t); len(got) != len(keys) || got["k0"].Waiting != 5 {
		t.Fatalf("before any tick: keys %+v, want %d keys with 5 waiting behind each head", got, len(keys))
	}
	stop := b.drive(t)
	b.waitStatus(t, pipeline.Executed, all...)
	stop()

	b.rec.mu.Lock()
	overlaps := slices.Clone(b.rec.overlaps)
	b.rec.mu.Unlock()
	if len(overlaps) > 0 {
		t.Fatalf("calls of one key ran together:\n%s", strings.Join(overlaps, "\n"))
	}
	last := map[string]span{}
	order := map[string][]uint64{}
	for _, sp := range b.rec.all() {
		if sp.key == "" {
			continue
		}
		if prev, ok := last[sp.key]; ok && sp.start.Before(prev.end) {
			t.Errorf("key %s: batch %d function %d started at %s, before batch %d function %d ended at %s",
				sp.key, sp.batch, sp.index, sp.start.Format(time.StampMicro), prev.batch, prev.index, prev.end.Format(time.StampMicro))
		}
		last[sp.key] = sp
		if o := order[sp.key]; len(o) == 0 || o[len(o)-1] != sp.batch {
			order[sp.key] = append(o, sp.batch)
		}
	}
	for _, k := range keys {
		if !slices.Equal(order[k], submitted[k]) {
			t.Errorf("key %s ran batches %v, want them one after the other in submission order %v", k, order[k], submitted[k])
		}
	}
	if got := b.keys(t); len(got) != 0 {
		t.Errorf("keys left waiting after every batch finished: %+v", got)
	}
}

// TestKeyFailingHeadBlocksOnlyItsKey: while a key's head retries, the
// batch behind it waits and the keys listing says RETRY; other keys and
// unkeyed batches run meanwhile. Once the head is dead-lettered, the next
// batch of its key runs.
func TestKeyFailingHeadBlocksOnlyItsKey(t *testing.T) {
	b := keyedSetup(t, 1)
	a1 := b.sendKeyed(t, "seq", "a", "seq.fail")
	a2 := b.sendKeyed(t, "seq", "a", "seq.step")
	b1 := b.sendKeyed(t, "seq", "b", "seq.step")
	b2 := b.sendKeyed(t, "seq", "b", "seq.step")
	u := b.sendKeyed(t, "seq", "", "seq.step")
	stop := b.drive(t)
	b.waitStatus(t, pipeline.Executed, b1, b2, u)
	testnats.Eventually(t, 10*time.Second, "the head retried", func() bool { return b.attempts.Load() >= 3 })
	if b.rec.ran(a2) || b.status(t, a2) != pipeline.InProcess {
		t.Fatalf("batch %d ran while the head of its key (%d) was retrying", a2, a1)
	}
	ks := b.keys(t)["a"]
	if ks.Head != a1 || ks.Waiting != 1 || ks.State != api.TxnRetry || (ks.Queue != api.QueueDelay && ks.Queue != api.QueueRetry) || ks.Attempts < 1 || ks.LastError == "" {
		t.Fatalf("key a while its head retries: %+v, want head %d, RETRY, DELAY or RETRY, 1 waiting", ks, a1)
	}
	if _, ok := b.keys(t)["b"]; ok {
		t.Fatalf("key b listed after its batches finished")
	}

	b.failing.Store(false)
	b.waitStatus(t, pipeline.Rejected, a1)
	b.waitStatus(t, pipeline.Executed, a2)
	stop()
	var headEnd, nextStart time.Time
	for _, sp := range b.rec.all() {
		switch sp.batch {
		case a1:
			headEnd = sp.end
		case a2:
			nextStart = sp.start
		}
	}
	if nextStart.Before(headEnd) {
		t.Fatalf("batch %d started at %s, before its key's head ended at %s", a2, nextStart, headEnd)
	}
}

// TestEvictHeadReleasesKey: a key's head waiting for its confirmation is
// listed REVISION / WAITING_INCLUSION; the batches behind it have no place
// in the queue (an insert of one at position 0 joins the back of its key
// and moves nothing); evicting the head lets them run, in order.
func TestEvictHeadReleasesKey(t *testing.T) {
	b := keyedSetup(t, 1)
	c1 := b.sendKeyed(t, "seq", "c", "seq.wait")
	c2 := b.sendKeyed(t, "seq", "c", "seq.step")
	stop := b.drive(t)
	testnats.Eventually(t, 10*time.Second, "the head waits for its confirmation", func() bool {
		return b.keys(t)["c"].State == api.TxnRevision
	})
	stop()
	if ks := b.keys(t)["c"]; ks.Head != c1 || ks.Queue != api.QueueWaitingInclusion || ks.Waiting != 1 || ks.Progress != api.StateParked {
		t.Fatalf("key c: %+v, want head %d REVISION / WAITING_INCLUSION with one waiting", ks, c1)
	}
	var q api.QueueReply
	if e := b.call(t, "owner", api.OpQueue, api.QueueRequest{Domain: domain, Priority: pipeline.Med}, &q); e != nil {
		t.Fatal(e)
	}
	if len(q.Items) != 1 || q.Items[0].ID != c1 || q.Items[0].Key != "c" {
		t.Fatalf("queue %+v, want only the head %d (key c): the batch behind it has no token", q.Items, c1)
	}
	var ins api.InsertReply
	if e := b.call(t, "owner", api.OpInsert, api.InsertRequest{Domain: domain, Priority: pipeline.Med, Position: 0, Label: "seq", Key: "c",
		Functions: api.Calls{{Type: "seq.step"}}}, &ins); e != nil {
		t.Fatal(e)
	}
	if !ins.WaitsForKey {
		t.Fatalf("insert of a batch of a busy key: %+v, want it to wait for its key", ins)
	}
	if got := b.queue(t, pipeline.Med); !equal(got, []uint64{c1}) {
		t.Fatalf("queue after the insert %v, want it unchanged [%d]", got, c1)
	}
	if ks := b.keys(t)["c"]; ks.Waiting != 2 {
		t.Fatalf("key c after the insert: %+v, want two waiting", ks)
	}

	var ev api.EvictReply
	if e := b.call(t, "owner", api.OpEvict, api.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: 0}, &ev); e != nil || ev.ID != c1 {
		t.Fatalf("evict: %+v %+v", ev, e)
	}
	b.drive(t)
	b.waitStatus(t, pipeline.Executed, c2, ins.ID)
	if st := b.status(t, c1); st != pipeline.RemovedByOwner {
		t.Fatalf("evicted head: %s", st)
	}
	var order []uint64
	for _, sp := range b.rec.all() {
		if sp.batch != c1 {
			order = append(order, sp.batch)
		}
	}
	if !equal(order, []uint64{c2, ins.ID}) {
		t.Fatalf("after the eviction ran %v, want %v", order, []uint64{c2, ins.ID})
	}
}

// TestDisallowedTypeRefused: a function type the domain does not allow is
// refused at send with a 400 naming it and the allowed types; nothing is
// recorded for the key, whose next batch runs at once.
func TestDisallowedTypeRefused(t *testing.T) {
	b := keyedSetup(t, 1)
	e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: "seq", Key: "d", Functions: api.Calls{{Type: "ledger.transfer"}}}, nil)
	if e == nil || e.Code != "400" || !strings.Contains(e.Msg, `"ledger.transfer"`) || !strings.Contains(e.Msg, "[seq.step seq.fail seq.wait]") {
		t.Fatalf("send of a disallowed type: %+v, want a 400 naming the type and the allowed ones", e)
	}
	if ks := b.keys(t); len(ks) != 0 {
		t.Fatalf("a refused batch left the key waiting: %+v", ks)
	}
	id := b.sendKeyed(t, "seq", "d", "seq.step")
	b.drive(t)
	b.waitStatus(t, pipeline.Executed, id)
}

// TestKeyHeadRepairedAtStart: authz died after a batch became its key's
// head, before its token was published (the record and the key's order
// written, nothing queued). The next authz start queues it, and the batch
// behind it follows.
func TestKeyHeadRepairedAtStart(t *testing.T) {
	b := keyedSetup(t, 1)
	b.stop()
	admin := b.env.JS(t, "admin")
	ctx := testnats.Context(t, 10*time.Second)
	// What send leaves behind when it dies between the key's order and the
	// token: a recorded batch listed as its key's head.
	id, _, err := submit.AssignID(ctx, admin, "")
	if err != nil {
		t.Fatal(err)
	}
	batch := pipeline.Batch{ID: id, Domain: domain, Label: "seq", Submitter: "alice", Priority: pipeline.Med, Key: "r",
		Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{{Type: "seq.step"}}, CreatedAt: time.Now().UTC()}
	batches, err := admin.KeyValue(ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := submit.Record(ctx, batches, &batch, "", false); err != nil {
		t.Fatal(err)
	}
	kv, err := admin.KeyValue(ctx, streams.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := keyorder.New(kv, nil).Append(ctx, domain, "r", id); err != nil {
		t.Fatal(err)
	}

	b.startKeyedAuthz(t)
	next := b.sendKeyed(t, "seq", "r", "seq.step")
	b.drive(t)
	b.waitStatus(t, pipeline.Executed, id, next)
}

// TestKeyTable: a label may list only the types its domain allows.
func TestKeyTable(t *testing.T) {
	_, err := authz.ParseTable([]byte(keyedTable + `
  other:
    domain: pay
    users: [alice]
    mode: atomic
    priority: med
    functions:
      ledger.transfer: {}
`))
	if !errors.Is(err, authz.ErrTable) || !strings.Contains(err.Error(), "labels.other.functions") || !strings.Contains(err.Error(), "ledger.transfer") {
		t.Fatalf("a label listing a type its domain does not allow: %v", err)
	}
}

// TestReplayOfADisallowedTypeRefused: a dead letter whose function type its
// domain no longer allows is refused at replay as at send, and nothing is
// queued or joins a key.
func TestReplayOfADisallowedTypeRefused(t *testing.T) {
	b := keyedSetup(t, 1)
	b.failing.Store(false) // seq.fail fails for good: a dead letter at once
	id := b.sendKeyed(t, "seq", "x", "seq.fail")
	stop := b.drive(t)
	b.waitStatus(t, pipeline.Rejected, id)
	stop()
	rec := b.record(t, id)
	if rec.DeadLetter == 0 {
		t.Fatalf("batch %d has no dead letter: %+v", id, rec)
	}
	// The owner narrows the domain's types: seq.fail is no longer allowed.
	b.stop()
	narrowed := strings.Replace(keyedTable, "allowed_types: [seq.step, seq.fail, seq.wait]", "allowed_types: [seq.step, seq.wait]", 1)
	if _, err := authz.ParseTable([]byte(narrowed)); err == nil {
		t.Fatal("a table whose label lists a type its domain disallows was accepted")
	}
	narrowed = strings.Replace(narrowed, "      seq.fail: {retry: {times: 1000, backoff: {kind: fixed, initial: 20ms}}}\n", "", 1)
	table, err := authz.ParseTable([]byte(narrowed))
	if err != nil {
		t.Fatal(err)
	}
	b.runAuthz(t, authz.Options{Table: table})
	e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: rec.DeadLetter}, nil)
	if e == nil || e.Code != "400" || !strings.Contains(e.Msg, `"seq.fail"`) || !strings.Contains(e.Msg, fmt.Sprintf("dead letter %d", rec.DeadLetter)) {
		t.Fatalf("replay of a disallowed type: %+v, want a 400 naming the dead letter and the type", e)
	}
	if ks := b.keys(t); len(ks) != 0 {
		t.Fatalf("a refused replay joined a key: %+v", ks)
	}
}

// TestKeyHeadRepairedAfterAFailedSend: a send whose batch became its key's
// head but whose token could not be published (the queue's stream gone for
// a moment) answers an error; once the stream is back, the replica's repair
// loop queues the head without a restart, and the key's next batch follows.
func TestKeyHeadRepairedAfterAFailedSend(t *testing.T) {
	b := keyedSetup(t, 1)
	admin := b.env.JS(t, "admin")
	ctx := testnats.Context(t, 20*time.Second)
	if err := admin.DeleteStream(ctx, streams.StreamMed); err != nil {
		t.Fatal(err)
	}
	e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: "seq", Key: "h", Functions: api.Calls{{Type: "seq.step"}}}, nil)
	if e == nil {
		t.Fatal("a send with no queue stream succeeded")
	}
	ks := b.keys(t)
	head := ks["h"].Head
	if head == 0 {
		t.Fatalf("keys %+v: the failed send's batch is not the key's head", ks)
	}
	if err := streams.Provision(ctx, admin, b.env.Settings, domain); err != nil {
		t.Fatal(err)
	}
	next := b.sendKeyed(t, "seq", "h", "seq.step")
	stop := b.drive(t)
	defer stop()
	b.waitStatus(t, pipeline.Executed, head, next)
}
