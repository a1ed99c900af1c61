package authz

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// onKey records a batch of alice's on key, without a token.
func onKey(t *testing.T, p *parts, key string) *pipeline.Batch {
	t.Helper()
	return p.recordOnly(t, p.batch(func(b *pipeline.Batch) { b.Key = key }))
}

// joined appends bs to their key's order, in turn, as their sends' joins
// did.
func joined(t *testing.T, p *parts, ko *keyOrders, bs ...*pipeline.Batch) {
	t.Helper()
	for _, b := range bs {
		if _, _, err := ko.order.Append(p.ctx, b.Domain, b.Key, b.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// finish writes b's record as executed: what applying its callback
// leaves.
func finish(t *testing.T, p *parts, b *pipeline.Batch) {
	t.Helper()
	o := pipeline.ExecutedOutcome(1)
	if _, err := p.store.updateRecord(p.ctx, b.ID, func(rec *records.BatchRecord) (bool, error) {
		rec.Status, rec.Outcome, rec.FinishedAt = pipeline.Executed, &o, p.clock.Now()
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// orderOf is key's order in pay as stored.
func orderOf(t *testing.T, p *parts, ko *keyOrders, key string) []uint64 {
	t.Helper()
	q, err := ko.order.Load(p.ctx, "pay", key)
	if err != nil {
		t.Fatal(err)
	}
	return q.IDs
}

// TestKeyRepairerRepairs: each kind of hand-over, repaired by one try and
// again by a repeat, which changes nothing more: a key's head left without
// its token (a send cut short after its join, a release cut short after
// its compare-and-set) gets one; heads finished or unrecorded are taken
// off on the way; a head that ran is left to its processor; a batch
// without a key gets its first token unless it finished or has no record;
// a batch outside its key's order joins it, first token only as the head,
// unless it finished meanwhile.
func TestKeyRepairerRepairs(t *testing.T) {
	p := newParts(t)
	ko := p.keyOrders()
	kr := ko.repair
	rv := ko.removal
	const ghost = 1 << 50 // an id without a record

	type want struct {
		order  []uint64
		tokens map[*pipeline.Batch]int
		// removed are finished as removed, their callback published.
		removed []*pipeline.Batch
	}
	for _, tc := range []struct {
		name  string
		setup func() (repairRef, want)
	}{
		{name: "a head without its token", setup: func() (repairRef, want) {
			b := onKey(t, p, "cut")
			joined(t, p, ko, b)
			return repairRef{domain: "pay", key: "cut"}, want{order: []uint64{b.ID}, tokens: map[*pipeline.Batch]int{b: 1}}
		}},
		{name: "a release cut short", setup: func() (repairRef, want) {
			h, next := onKey(t, p, "rel"), onKey(t, p, "rel")
			joined(t, p, ko, h, next)
			finish(t, p, h)
			if _, _, err := ko.order.Remove(p.ctx, "pay", "rel", h.ID); err != nil {
				t.Fatal(err)
			}
			return repairRef{domain: "pay", key: "rel"}, want{order: []uint64{next.ID}, tokens: map[*pipeline.Batch]int{h: 0, next: 1}}
		}},
		{name: "finished and unrecorded heads taken off", setup: func() (repairRef, want) {
			done, removed, next := onKey(t, p, "off"), onKey(t, p, "off"), onKey(t, p, "off")
			joined(t, p, ko, done)
			if _, _, err := ko.order.Append(p.ctx, "pay", "off", ghost); err != nil {
				t.Fatal(err)
			}
			joined(t, p, ko, removed, next)
			finish(t, p, done)
			// Cancelled while it waited, its callback not yet published.
			if err := rv.markRemoved(p.ctx, removed, p.loadProgress(t, removed), "cancelled"); err != nil {
				t.Fatal(err)
			}
			return repairRef{domain: "pay", key: "off"}, want{order: []uint64{next.ID}, tokens: map[*pipeline.Batch]int{done: 0, removed: 0, next: 1}, removed: []*pipeline.Batch{removed}}
		}},
		{name: "a head that ran", setup: func() (repairRef, want) {
			b := onKey(t, p, "ran")
			joined(t, p, ko, b)
			st := p.loadProgress(t, b)
			st.Next = 1
			if err := p.progress.Save(p.ctx, "pay", st); err != nil {
				t.Fatal(err)
			}
			return repairRef{domain: "pay", key: "ran"}, want{order: []uint64{b.ID}, tokens: map[*pipeline.Batch]int{b: 0}}
		}},
		{name: "a key nobody waits on", setup: func() (repairRef, want) {
			return repairRef{domain: "pay", key: "none"}, want{}
		}},
		{name: "a batch without a key", setup: func() (repairRef, want) {
			b := p.recordOnly(t, p.batch(nil))
			return repairRef{domain: "pay", id: b.ID}, want{tokens: map[*pipeline.Batch]int{b: 1}}
		}},
		{name: "a batch without a key, finished", setup: func() (repairRef, want) {
			b := p.recordOnly(t, p.batch(nil))
			finish(t, p, b)
			return repairRef{domain: "pay", id: b.ID}, want{tokens: map[*pipeline.Batch]int{b: 0}}
		}},
		{name: "a batch without a record", setup: func() (repairRef, want) {
			return repairRef{domain: "pay", id: ghost}, want{}
		}},
		{name: "a join as the head", setup: func() (repairRef, want) {
			b := onKey(t, p, "join")
			return repairRef{domain: "pay", key: "join", id: b.ID}, want{order: []uint64{b.ID}, tokens: map[*pipeline.Batch]int{b: 1}}
		}},
		{name: "a join behind the head", setup: func() (repairRef, want) {
			h, b := onKey(t, p, "behind"), onKey(t, p, "behind")
			joined(t, p, ko, h)
			if err := kr.repair(p.ctx, repairRef{domain: "pay", key: "behind"}); err != nil {
				t.Fatal(err)
			}
			return repairRef{domain: "pay", key: "behind", id: b.ID}, want{order: []uint64{h.ID, b.ID}, tokens: map[*pipeline.Batch]int{h: 1, b: 0}}
		}},
		{name: "a join of a batch finished meanwhile", setup: func() (repairRef, want) {
			b := onKey(t, p, "gone")
			finish(t, p, b)
			return repairRef{domain: "pay", key: "gone", id: b.ID}, want{tokens: map[*pipeline.Batch]int{b: 0}}
		}},
		{name: "a join without a record", setup: func() (repairRef, want) {
			return repairRef{domain: "pay", key: "ghost", id: ghost}, want{}
		}},
	} {
		r, w := tc.setup()
		for try := range 2 {
			if err := kr.repair(p.ctx, r); err != nil {
				t.Fatalf("%s, try %d: %v", tc.name, try, err)
			}
			if r.key != "" {
				if got := orderOf(t, p, ko, r.key); !slices.Equal(got, w.order) {
					t.Fatalf("%s, try %d: order %v, want %v", tc.name, try, got, w.order)
				}
			}
			for b, n := range w.tokens {
				if got := len(p.tokens(t, pipeline.Med, b.ID)); got != n {
					t.Fatalf("%s, try %d: batch %d has %d tokens, want %d", tc.name, try, b.ID, got, n)
				}
			}
			for _, b := range w.removed {
				if !p.removedBy(t, b) {
					t.Fatalf("%s, try %d: batch %d not finished as removed: progress %+v, callbacks %+v", tc.name, try, b.ID, p.loadProgress(t, b).Progress, p.callbacks(t, b.ID))
				}
			}
		}
	}
}

// TestKeyRepairerHandOvers: the pending set takes each key or batch once,
// and only while the loop runs; one handed over again while a try runs is
// tried again, not dropped, since the try may have read the state before
// the hand-over; each kind is bounded apart (keys and joins, batches), and
// a hand-over refused says so in the log.
func TestKeyRepairerHandOvers(t *testing.T) {
	logs := &testnats.LogBuffer{}
	kr := &keyRepairer{log: slog.New(slog.NewJSONHandler(logs, nil)),
		repairs: repairs{pending: map[repairRef]*repairWait{}, wake: make(chan struct{}, 1)}}
	rs := &kr.repairs
	k := repairRef{domain: "pay", key: "k"}
	if kr.repairKey("pay", "k") || len(rs.pending) != 0 || !strings.Contains(logs.String(), "key left for the next start") {
		t.Fatalf("a hand-over to a loop that does not run: pending %v, log %s", rs.pending, logs)
	}
	rs.setOpen(true)
	first := kr.repairKey("pay", "k")
	second := kr.repairKey("pay", "k")
	if !first || !second || len(rs.pending) != 1 {
		t.Fatalf("one key handed over twice: pending %v, want it once", rs.pending)
	}
	if _, ok := testnats.Receive(rs.wake, time.Second); !ok {
		t.Fatal("a hand-over did not wake the loop")
	}
	due := rs.due(time.Now())
	if len(due) != 1 || due[0].repairRef != k || due[0].handed != 1 {
		t.Fatalf("due %+v, want the key, handed over once more", due)
	}
	// A try that began before the last hand-over does not end it.
	rs.done(k, 0)
	if due := rs.due(time.Now()); len(due) != 1 {
		t.Fatalf("a key handed over during its try is no longer due: %+v", due)
	}
	rs.done(k, 1)
	if len(rs.pending) != 0 {
		t.Fatalf("pending %v after a try that saw every hand-over", rs.pending)
	}

	// Backoff: doubling from keyRepairFirst to keyRepairMax, per key.
	kr.repairKey("pay", "k")
	now := time.Now()
	var waits []time.Duration
	for range 7 {
		waits = append(waits, rs.later(k, now))
	}
	if want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}; !slices.Equal(waits, want) {
		t.Fatalf("backoff %v, want %v", waits, want)
	}
	if at, ok := rs.next(); !ok || !at.Equal(now.Add(5*time.Second)) || len(rs.due(now)) != 0 {
		t.Fatalf("next try at %v (%v), want %v and none due now", at, ok, now.Add(5*time.Second))
	}

	// Bounds: keys and joins together, batches apart.
	for i := 1; len(rs.pending) < repairBound; i++ {
		if !kr.repairJoin("pay", "j", uint64(i)) {
			t.Fatalf("join %d refused below the bound", i)
		}
	}
	if kr.repairKey("pay", "one-too-many") || strings.Count(logs.String(), "key left for the next start") != 2 {
		t.Fatal("a key taken past the bound")
	}
	for i := 1; i <= repairBound; i++ {
		if !kr.repairBatch("pay", uint64(i)) {
			t.Fatalf("batch %d refused, with the keys' bound reached and none of the batches'", i)
		}
	}
	if kr.repairBatch("pay", repairBound+1) || !strings.Contains(logs.String(), "batch left recorded and unqueued") {
		t.Fatal("a batch taken past the bound")
	}
}

// TestKeyRepairerLoopRetriesAndStops: the loop tries what is handed over,
// and one that fails (here a key whose order does not decode) is tried
// again after its backoff until it succeeds; a failure and the repair are
// logged. When it stops, what still waits is logged as left over, and the
// loop takes no more hand-overs.
func TestKeyRepairerLoopRetriesAndStops(t *testing.T) {
	p := newParts(t)
	ko := p.keyOrders()
	logs := &testnats.LogBuffer{}
	kr := ko.repair
	kr.log = slog.New(slog.NewJSONHandler(logs, nil))
	keys, err := p.admin.KeyValue(p.ctx, streams.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Put(p.ctx, streams.KeyQueueKey("pay", "k"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(p.ctx)
	done := make(chan struct{})
	kr.repairs.setOpen(true)
	go func() { defer close(done); _ = kr.run(ctx) }()
	defer func() { stop(); testnats.Stopped(t, "repair loop", done) }()

	if !kr.repairKey("pay", "k") {
		t.Fatal("the running loop refused a key")
	}
	testnats.Eventually(t, 10*time.Second, "the failed try logged", func() bool {
		return strings.Contains(logs.String(), "key head not repaired yet")
	})
	// The order repaired by hand: the next try gives its head its token.
	b := onKey(t, p, "k")
	data, err := records.Encode(&records.KeyQueue{Domain: "pay", Key: "k", IDs: []uint64{b.ID}, By: []string{"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Put(p.ctx, streams.KeyQueueKey("pay", "k"), data); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "the key's head queued", func() bool {
		return len(p.tokens(t, pipeline.Med, b.ID)) == 1 && strings.Contains(logs.String(), "key head repaired")
	})
	kr.repairs.mu.Lock()
	left := len(kr.repairs.pending)
	kr.repairs.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d hand-overs left after the repair", left)
	}

	// Stopped with a batch that cannot be queued yet: it is logged, and
	// nothing more is taken.
	u := p.recordOnly(t, p.batch(nil))
	if _, err := keys.Put(p.ctx, streams.KeyQueueKey("pay", "j"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	j := onKey(t, p, "j")
	if !kr.repairJoin("pay", "j", j.ID) {
		t.Fatal("the running loop refused a join")
	}
	testnats.Eventually(t, 10*time.Second, "the failed join logged", func() bool {
		return strings.Contains(logs.String(), "batch not in its key's order yet")
	})
	stop()
	testnats.Stopped(t, "repair loop", done)
	if kr.repairBatch("pay", u.ID) || len(p.tokens(t, pipeline.Med, u.ID)) != 0 {
		t.Fatal("a stopped loop took a batch")
	}
	if !strings.Contains(logs.String(), "authz stopped before it could join it") || len(kr.repairs.pending) != 0 {
		t.Fatalf("stopped with a join waiting: pending %v, log %s", kr.repairs.pending, logs)
	}
}
