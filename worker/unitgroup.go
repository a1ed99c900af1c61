package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// The atomic units of a request share their writes to the results bucket:
// a unit's claim and its completion record live in the group record of
// its batch id (streams.UnitGroupKey), so a request claims all its units
// of a group with one compare-and-set write and records them with one
// more, instead of two writes per unit. The guarantees are once's:
// only the request whose claim a group holds runs the unit, a repeated
// call is answered from the record, a claim whose worker died expires
// and is taken over, a failed run leaves no record, a record is written
// until it is written and expires after its write.

// groupTries bounds the compare-and-set writes of one group in a row, each
// after reading what another writer left: past it the units are busy
// (not attempted).
const groupTries = 8

// claimTries bounds the claim writes of one group in a row. Claims are
// tried harder than groupTries, with a short random pause after each lost
// race (contentionPause): a unit answered busy is put back for a quarter
// of a second or more, while two workers whose requests keep meeting in
// one group (several processors draining consecutive ids) settle within
// a few milliseconds.
const claimTries = 32

// contentionPause is the pause before the next claim write of a group
// after try lost races in a row: random, up to 100µs doubling to 5ms, so
// that two writers that keep meeting fall out of step.
func contentionPause(try int) time.Duration {
	return rand.N(min(100*time.Microsecond<<min(try, 10), 5*time.Millisecond))
}

// groupCacheSize bounds the groups a worker remembers (revision and
// value), so that its next write of a group expects the revision it wrote
// instead of reading it first.
const groupCacheSize = 256

// groupCacheBytes bounds the value of a group the cache keeps: a group
// holding large outputs is read again rather than kept.
const groupCacheBytes = 96 << 10

// inlineRecordMax bounds the record of a unit kept inside its group; a
// larger one goes under the unit's own key, with a marker in the group.
// Every write of a group rewrites its whole value, so this is what one
// caller's outputs may add to the writes of the batches whose ids share
// its group: at most 64 of these, about 70 KiB, kept in the cache.
const inlineRecordMax = 1 << 10

// errGroupUnreadable is a group record that does not decode: its units are
// busy (not attempted) rather than run over a record nobody can read.
var errGroupUnreadable = errors.New("worker: unit group record does not decode")

// errGroupTooLarge is a group record whose value would not fit the
// server's max_payload.
var errGroupTooLarge = errors.New("worker: unit group record too large")

// group is a group record as read or written at revision rev (0: no
// message, a group never written or expired).
type group struct {
	rev     uint64
	entries []records.UnitEntry
	// size is the value's encoded size.
	size int
}

// find is the index of key's entry, or -1.
func (g *group) find(key string) int {
	for i := range g.entries {
		if g.entries[i].Key == key {
			return i
		}
	}
	return -1
}

// groupCache remembers, per group key, the last revision this worker wrote
// or read and the value at it. Its locks serialise this worker's writes
// of a group: two requests of the same worker that share a group take
// turns (one round trip each) rather than race (a lost compare-and-set
// costs a read and another write).
type groupCache struct {
	mu    sync.Mutex
	m     map[string]group
	seed  maphash.Seed
	locks [64]sync.Mutex
}

// lock takes the write turn of group gk (shared with the groups that hash
// alike) and returns its release.
func (c *groupCache) lock(gk string) func() {
	c.mu.Lock()
	if c.seed == (maphash.Seed{}) {
		c.seed = maphash.MakeSeed()
	}
	seed := c.seed
	c.mu.Unlock()
	l := &c.locks[maphash.String(seed, gk)%uint64(len(c.locks))]
	l.Lock()
	return l.Unlock
}

func (c *groupCache) get(key string) (group, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g, ok := c.m[key]
	return g, ok
}

// put remembers g unless a later revision is remembered already.
func (c *groupCache) put(key string, g group) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.m[key]; ok && old.rev > g.rev {
		return
	}
	if g.size > groupCacheBytes {
		delete(c.m, key)
		return
	}
	if c.m == nil {
		c.m = map[string]group{}
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= groupCacheSize {
		for k := range c.m { // any one: the cache saves a read, nothing more
			delete(c.m, k)
			break
		}
	}
	c.m[key] = g
}

func (c *groupCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// unitCall is one unit of a request on its way through its group.
type unitCall struct {
	req *records.WorkRequest
	key string
	// rep is the answer: decided without running (a record, busy), or
	// the run's.
	rep *records.WorkReply
	// claimed: this request holds the unit's claim; fresh: its entry was
	// absent, so no earlier call ever ran it.
	claimed, fresh bool
	// entry is what the record write puts in place of the claim: the
	// record, its marker (Own), or a released run; nil leaves the claim
	// to expire.
	entry *records.UnitEntry
	// own is the completion record to write under the unit's own key
	// before the group's marker.
	own []byte
	// written: the unit's record is the one in the bucket.
	written bool
}

// groupRun is one request's pass over its units' groups.
type groupRun struct {
	w     *Worker
	nonce uint64
	until time.Time
	// calls are the units by group key, in the order they came.
	calls map[string][]*unitCall
	order []string
}

// runGrouped runs units as once runs a call, through their group records:
// it claims them (one write per group), runs each claimed unit through
// run, and records them (one write per group) before it answers.
func (w *Worker) runGrouped(ctx context.Context, units []records.WorkRequest, run func(*records.WorkRequest) *records.WorkReply) []records.WorkReply {
	reps := make([]records.WorkReply, len(units))
	r := &groupRun{w: w, nonce: rand.Uint64() | 1, until: w.claimUntil(ctx), calls: map[string][]*unitCall{}}
	calls := make([]unitCall, len(units))
	for i := range units {
		c := &calls[i]
		c.req, c.key = &units[i], unitKey(&units[i])
		gk := streams.UnitGroupKey(units[i].BatchID)
		if _, ok := r.calls[gk]; !ok {
			r.order = append(r.order, gk)
		}
		r.calls[gk] = append(r.calls[gk], c)
	}
	var wg sync.WaitGroup
	for _, gk := range r.order {
		wg.Go(func() { r.claim(ctx, gk) })
	}
	wg.Wait()
	// A unit's record is written once the request's other units of its
	// group have ended too, or recordLinger after its run ended, whichever
	// comes first, with those of its group that ended meanwhile (group
	// commit: one write of a group on its way at a time), rather than
	// after the request's slowest unit: the time between a handler's
	// effect and its record, in which a worker that dies leaves an effect
	// without a record, stays one run's and a linger.
	flushes := make(map[string]*recordFlush, len(r.order))
	for _, gk := range r.order {
		flushes[gk] = &recordFlush{more: make(chan struct{}, 1)}
	}
	for i := range calls {
		if c := &calls[i]; c.claimed {
			flushes[streams.UnitGroupKey(c.req.BatchID)].running++
		}
	}
	var fwg sync.WaitGroup
	for i := range calls {
		if c := &calls[i]; c.claimed {
			gk := streams.UnitGroupKey(c.req.BatchID)
			wg.Go(func() {
				r.run(ctx, c, run)
				flushes[gk].add(c, &fwg, func(mine []*unitCall) { r.record(ctx, gk, mine) })
			})
		}
	}
	wg.Wait()
	fwg.Wait()
	for i := range calls {
		c := &calls[i]
		reps[i] = *c.rep
		reps[i].Fresh = c.claimed && c.fresh && c.written && c.rep.Error == nil && !c.rep.Recorded
	}
	return reps
}

// claim claims the units of group gk this request can run, with one
// compare-and-set write: expecting the revision this worker remembers (or
// none), then, after a conflict, the revision read. Each unit is answered
// from a live record, busy under another request's live claim, or
// claimed.
func (r *groupRun) claim(ctx context.Context, gk string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*kvTimeout)
	defer cancel()
	unlock := r.w.groups.lock(gk)
	r.claimLocked(cctx, gk)
	unlock()
	r.answerOwn(cctx, r.calls[gk])
}

// claimLocked is claim in gk's write turn.
func (r *groupRun) claimLocked(cctx context.Context, gk string) {
	w, cs := r.w, r.calls[gk]
	// g may be the value the cache shares: claims reads it, and writes
	// into a copy (pruned).
	g, cached := w.groups.get(gk)
	for try := 0; ; try++ {
		next, claims := r.claims(&g, cs, time.Now())
		if claims == 0 && cached && anyBusy(cs) {
			// Answered from what this worker remembers: a busy unit
			// may have been recorded since; read it.
			cached = false
			var err error
			if g, err = w.readGroup(cctx, gk); err != nil {
				r.unclaimable(cs, err)
				return
			}
			continue
		}
		if claims == 0 {
			return
		}
		rev, err := w.writeGroup(cctx, gk, &next, g.rev)
		if err == nil {
			next.rev = rev
			w.groups.put(gk, next)
			for _, c := range cs {
				c.claimed = c.rep == nil
			}
			return
		}
		if !jsapi.IsRevisionConflict(err) || try == claimTries-1 {
			r.unclaimable(cs, fmt.Errorf("worker: claim %s in %s: %w", cs[0].key, gk, err))
			return
		}
		if try > 0 {
			t := time.NewTimer(contentionPause(try))
			select {
			case <-t.C:
			case <-cctx.Done():
				t.Stop()
				r.unclaimable(cs, fmt.Errorf("worker: claim %s in %s: %w", cs[0].key, gk, cctx.Err()))
				return
			}
		}
		cached = false
		if g, err = w.readGroup(cctx, gk); err != nil {
			r.unclaimable(cs, err)
			return
		}
	}
}

// claims decides each unit of cs from g at now, and returns the group to
// write (g without what no longer counts, with this request's claims) and
// how many units it claims. g is only read: it may be the value the cache
// shares.
func (r *groupRun) claims(g *group, cs []*unitCall, now time.Time) (next group, claims int) {
	next = group{rev: g.rev, entries: r.w.pruned(g.entries, now)}
	for _, c := range cs {
		c.rep, c.fresh, c.entry = nil, false, nil
		if j := next.find(c.key); j >= 0 && next.entries[j].Running && next.entries[j].Claim == r.nonce {
			c.rep = busy(fmt.Sprintf("worker: %s appears twice in one request", c.key))
			continue
		}
		var prev *records.UnitEntry
		if i := g.find(c.key); i >= 0 {
			prev = &g.entries[i]
		}
		switch {
		case prev == nil:
			c.fresh = true
		case prev.Running && prev.Live(now):
			c.rep = busy(fmt.Sprintf("worker: %s is running on %s until %s", c.key, prev.Worker, prev.Until.Format(time.RFC3339Nano)))
			continue
		case prev.Running:
			r.w.log.Warn("expired claim taken over", "key", c.key, "holder", prev.Worker)
		case prev.Recorded() && prev.Live(now) && prev.Own:
			c.rep = &records.WorkReply{Recorded: true} // its outputs: answerOwn reads them
			c.entry = prev
			continue
		case prev.Recorded() && prev.Live(now):
			c.rep = &records.WorkReply{Outputs: prev.Outputs, Recorded: true}
			continue
		}
		// Absent, released, or expired: this request's to run.
		claim := records.UnitEntry{Key: c.key, Running: true, Claim: r.nonce, Until: r.until, Worker: r.w.opts.Name}
		if i := next.find(c.key); i >= 0 {
			next.entries[i] = claim
		} else {
			next.entries = append(next.entries, claim)
		}
		claims++
	}
	return next, claims
}

// anyBusy says whether a unit of cs was found busy.
func anyBusy(cs []*unitCall) bool {
	for _, c := range cs {
		if c.rep != nil && c.rep.Error != nil {
			return true
		}
	}
	return false
}

// unclaimable answers every unit of cs not yet answered: not attempted.
func (r *groupRun) unclaimable(cs []*unitCall, err error) {
	for _, c := range cs {
		if c.rep == nil || c.entry != nil {
			c.rep, c.entry = unavailable(err), nil
		}
	}
}

// answerOwn answers the units whose record lives under their own key
// from it.
func (r *groupRun) answerOwn(ctx context.Context, cs []*unitCall) {
	for _, c := range cs {
		if c.claimed || c.entry == nil {
			continue
		}
		c.entry = nil
		out, ok, err := r.w.ownRecord(ctx, c.key)
		if ok {
			c.rep.Outputs = out.Outputs
			continue
		}
		c.rep = unavailable(fmt.Errorf("worker: the completion record of %s, kept under its own key, cannot be read (%v)", c.key, err))
	}
}

// ownRecord reads the completion record kept under a unit's own key: ok
// when there is one; err when the key could not be read or holds
// something else (none: no such key).
func (w *Worker) ownRecord(ctx context.Context, key string) (_ records.Completion, ok bool, err error) {
	gctx, cancel := context.WithTimeout(ctx, kvTimeout)
	defer cancel()
	e, err := w.results.Get(gctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return records.Completion{}, false, nil
	}
	if err != nil {
		return records.Completion{}, false, fmt.Errorf("worker: read %s: %w", key, err)
	}
	c, err := records.Decode[records.Completion](e.Value())
	if err != nil {
		return c, false, fmt.Errorf("worker: completion record %s: %w", key, err)
	}
	if c.Running {
		return c, false, fmt.Errorf("worker: %s holds a claim, not a record", key)
	}
	return c, true, nil
}

// run runs a claimed unit and decides the entry its record write puts in
// place of the claim. A unit that ran before (not fresh) may have a
// record under its own key that its claimer wrote before it died: that
// answers it instead.
func (r *groupRun) run(ctx context.Context, c *unitCall, run func(*records.WorkRequest) *records.WorkReply) {
	w := r.w
	released := &records.UnitEntry{Key: c.key, Released: true, Claim: r.nonce, Worker: w.opts.Name}
	if !c.fresh {
		rec, ok, err := w.ownRecord(ctx, c.key)
		switch {
		case ok:
			c.rep = &records.WorkReply{Outputs: rec.Outputs, Recorded: true}
			c.entry = &records.UnitEntry{Key: c.key, Own: true, Claim: r.nonce, Worker: w.opts.Name}
			return
		case err != nil:
			c.rep, c.entry = unavailable(err), released
			return
		}
	}
	c.rep = run(c.req)
	if c.rep.Error != nil {
		c.entry = released
		return
	}
	e := &records.UnitEntry{Key: c.key, Claim: r.nonce, Worker: w.opts.Name, Outputs: c.rep.Outputs, Until: r.until}
	if fitsInline(e.Outputs, min(inlineRecordMax, w.maxRecord()/streams.UnitGroupSize)) {
		c.entry = e
		return
	}
	own, fail := w.recordOf(c.req, c.key, c.rep.Outputs)
	if fail != nil {
		c.rep, c.entry = fail, released
		return
	}
	c.own = own
	c.entry = &records.UnitEntry{Key: c.key, Own: true, Claim: r.nonce, Worker: w.opts.Name}
}

// fitsInline says whether a record of outputs takes at most limit bytes
// in its group's value; small outputs are told without encoding them.
func fitsInline(outputs []pipeline.Output, limit int) bool {
	n := 64 // the entry's other fields
	for _, o := range outputs {
		n += 32 + len(o.Type) + len(o.Data) + len(o.Ref)
	}
	if n <= limit {
		return true
	}
	e := records.UnitEntry{Key: "0.unit.0", Claim: 1, Until: time.Now(), Worker: "w", Outputs: outputs}
	return len(e.AppendMsgpack(nil)) <= limit
}

// recordLinger bounds how long a unit whose run ended waits for the
// request's other units of its group before its record is written without
// them: units that end together (a request of quick handlers) share one
// write of their group instead of one each, and a slow one does not hold
// the others' records back by more than this. A variable for tests.
var recordLinger = time.Millisecond

// recordFlush gathers the units of one group whose runs ended, for the
// record writes of their request: a write that starts while none is on
// its way waits for the units still running (at most recordLinger), and
// while one write is on its way, the units that end wait, and the next
// write takes them all.
type recordFlush struct {
	mu      sync.Mutex
	pending []*unitCall
	flying  bool
	// running counts the request's claimed units of the group whose runs
	// have not ended; more is signalled (never blocking) as each ends.
	running int
	more    chan struct{}
}

// add hands over c, whose run ended, and starts a write (write, on a
// goroutine of wg) unless one is on its way, which then takes c next.
func (f *recordFlush) add(c *unitCall, wg *sync.WaitGroup, write func([]*unitCall)) {
	f.mu.Lock()
	f.pending = append(f.pending, c)
	f.running--
	start := !f.flying
	f.flying = true
	f.mu.Unlock()
	if !start {
		select {
		case f.more <- struct{}{}:
		default:
		}
		return
	}
	wg.Go(func() {
		f.linger()
		for {
			f.mu.Lock()
			mine := f.pending
			f.pending = nil
			if len(mine) == 0 {
				f.flying = false
				f.mu.Unlock()
				return
			}
			f.mu.Unlock()
			write(mine)
		}
	})
}

// linger waits until no unit of the group is running, or recordLinger.
func (f *recordFlush) linger() {
	var t *time.Timer
	for {
		f.mu.Lock()
		running := f.running
		f.mu.Unlock()
		if running == 0 {
			break
		}
		if t == nil {
			t = time.NewTimer(recordLinger)
		}
		select {
		case <-f.more:
			continue
		case <-t.C:
			return
		}
	}
	if t != nil {
		t.Stop()
	}
}

// record writes the outcome of calls, units of group gk this request
// claimed whose runs ended: records, markers of records kept under their
// own keys, and released runs, in place of the claims, with one
// compare-and-set write, tried again until it is written or a little past
// the claims' end (retry). A claim no longer this request's (taken over
// after it expired) is left alone, and its record not written.
func (r *groupRun) record(ctx context.Context, gk string, calls []*unitCall) {
	w := r.w
	var mine []*unitCall
	for _, c := range calls {
		if c.claimed && c.entry != nil {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return
	}
	for _, c := range mine {
		if c.own != nil && !w.writeOwn(ctx, c.key, c.own, r.until) {
			c.entry = nil // its claim expires; a later call finds the record or runs it
		}
	}
	written := w.retry(ctx, gk, "completion record", r.until.Add(claimGrace), func(ctx context.Context) (bool, error) {
		unlock := w.groups.lock(gk)
		defer unlock()
		g, _ := w.groups.get(gk)
		for try := 0; ; try++ {
			next, changed := r.records(g, mine, time.Now()) // into a copy, as claims
			if !changed {
				return true, nil
			}
			rev, err := w.writeGroup(ctx, gk, &next, g.rev)
			if err == nil {
				next.rev = rev
				w.groups.put(gk, next)
				return true, nil
			}
			if errors.Is(err, errGroupTooLarge) {
				if !r.moveOut(ctx, mine) {
					w.log.Error("completion records not written: their group record would exceed max_payload", "group", gk)
					return false, errGaveUp
				}
				continue
			}
			if !jsapi.IsRevisionConflict(err) || try == groupTries-1 {
				return false, err
			}
			// Another writer, or an earlier try whose answer was lost.
			if g, err = w.readGroup(ctx, gk); err != nil {
				if errors.Is(err, errGroupUnreadable) {
					w.log.Error("completion records not written: their group record does not decode", "group", gk)
					return false, errGaveUp
				}
				return false, err
			}
		}
	})
	for _, c := range mine {
		c.written = written && c.entry != nil
	}
}

// moveOut moves the largest record of mine kept in the group's value to
// its own key, leaving a marker: the group's value would not fit
// max_payload otherwise. It reports whether there was one to move.
func (r *groupRun) moveOut(ctx context.Context, mine []*unitCall) bool {
	var big *unitCall
	size := 0
	for _, c := range mine {
		if c.entry == nil || !c.entry.Recorded() || c.entry.Own {
			continue
		}
		if n := len(c.entry.AppendMsgpack(nil)); n > size {
			big, size = c, n
		}
	}
	if big == nil {
		return false
	}
	own, err := records.Encode(&records.Completion{Outputs: big.entry.Outputs, Worker: r.w.opts.Name})
	if err != nil || !r.w.writeOwn(ctx, big.key, own, r.until) {
		big.entry = nil // its claim expires; a later call finds the record or runs it
		return true
	}
	big.entry = &records.UnitEntry{Key: big.key, Own: true, Claim: r.nonce, Worker: r.w.opts.Name}
	return true
}

// records turns this request's claims in g into the entries its units
// ended with; changed says whether any is left to write. A unit whose
// entry already holds this request's outcome (an earlier try written) is
// done; one whose claim another request holds was taken over. g is only
// read, as in claims.
func (r *groupRun) records(g group, mine []*unitCall, now time.Time) (next group, changed bool) {
	next = group{rev: g.rev, entries: r.w.pruned(g.entries, now)}
	for _, c := range mine {
		if c.entry == nil {
			continue
		}
		e := *c.entry
		e.Until = now.Add(r.w.recordLife)
		i := next.find(c.key)
		switch {
		case i < 0:
			// Nobody holds it (its claim expired and went): the record
			// is still this run's.
			next.entries = append(next.entries, e)
			changed = true
		case next.entries[i].Claim != r.nonce:
			r.w.log.Error("completion record not written: the call's claim was taken over; its handler may have run twice", "key", c.key)
			c.entry = nil
		case next.entries[i].Running, next.entries[i].Released != e.Released, next.entries[i].Own != e.Own:
			// This request's claim (or, once expired, its release by
			// another write): nobody else took it.
			next.entries[i] = e
			changed = true
		}
		// Otherwise this request's outcome is there already: an earlier
		// try was written, its answer lost.
	}
	return next, changed
}

// pruned is entries without those that no longer count at now: expired
// records and released runs go; an expired claim (its worker died or
// overran it) becomes a released run, so a later claim knows the unit
// ran before.
func (w *Worker) pruned(entries []records.UnitEntry, now time.Time) []records.UnitEntry {
	out := make([]records.UnitEntry, 0, len(entries)+1)
	for _, e := range entries {
		switch {
		case e.Live(now):
			out = append(out, e)
		case e.Running:
			out = append(out, records.UnitEntry{Key: e.Key, Released: true, Claim: e.Claim, Worker: e.Worker, Until: e.Until.Add(w.recordLife)})
		}
	}
	return out
}

// writeOwn writes a unit's completion record done under its own key, as
// once writes a call's, until it is written or a little past until.
func (w *Worker) writeOwn(ctx context.Context, key string, done []byte, until time.Time) bool {
	return w.retry(ctx, key, "completion record", until.Add(claimGrace), func(ctx context.Context) (bool, error) {
		err := w.writeRecord(ctx, key, done, 0)
		if err == nil || !jsapi.IsRevisionConflict(err) {
			return err == nil, err
		}
		e, gerr := w.results.Get(ctx, key)
		switch {
		case gerr != nil:
			return false, gerr
		case bytes.Equal(e.Value(), done):
			return true, nil // an earlier try, its answer lost
		}
		w.log.Error("completion record not written: its own key holds another; its handler may have run twice", "key", key)
		return false, errGaveUp
	})
}

// readGroup reads group record gk: its entries and revision (0 and none
// for a group never written or expired). A value that does not decode
// matches errGroupUnreadable.
func (w *Worker) readGroup(ctx context.Context, gk string) (group, error) {
	a, err := w.pub.Request(jsapi.KVGetMsg(streams.BucketResults, gk))
	if err != nil {
		return group{}, fmt.Errorf("worker: read %s: %w", gk, err)
	}
	if _, err := a.Wait(ctx); err != nil {
		return group{}, fmt.Errorf("worker: read %s: %w", gk, err)
	}
	m := a.Msg()
	data, rev, err := jsapi.ReadDirectGet(m)
	switch {
	case errors.Is(err, jsapi.ErrNoValue):
		w.groups.forget(gk)
		return group{}, nil
	case err != nil:
		return group{}, fmt.Errorf("worker: read %s: %w", gk, err)
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return group{rev: rev}, nil
	}
	v, err := records.Decode[records.UnitGroup](data)
	if err != nil {
		w.groups.forget(gk)
		return group{}, fmt.Errorf("%w: %s: %w", errGroupUnreadable, gk, err)
	}
	g := group{rev: rev, entries: v.Units, size: len(data)}
	w.groups.put(gk, g)
	return g, nil
}

// writeGroup writes g as group record gk with compare-and-set on revision
// rev (0: no message), with the time to live of its longest-lived entry:
// the key's last write decides when the server removes it.
func (w *Worker) writeGroup(ctx context.Context, gk string, g *group, rev uint64) (uint64, error) {
	var a *jsapi.PendingAck
	var err error
	records.EncodeWith(&records.UnitGroup{Units: g.entries}, func(data []byte) {
		if len(data) > w.maxRecord() {
			err = fmt.Errorf("%w: %s takes %d bytes, room for %d", errGroupTooLarge, gk, len(data), w.maxRecord())
			return
		}
		g.size = len(data)
		m := jsapi.KVUpdateMsg(streams.BucketResults, gk, data, rev)
		w.setGroupTTL(m, g.entries, time.Now())
		a, err = w.pub.Publish(m) // copies data
	})
	if err != nil {
		return 0, err
	}
	return a.Wait(ctx)
}

// setGroupTTL gives m the longest remaining lifetime among entries, on a
// bucket whose records carry one.
func (w *Worker) setGroupTTL(m *nats.Msg, entries []records.UnitEntry, now time.Time) {
	if w.recordTTL <= 0 {
		return
	}
	var last time.Time
	for _, e := range entries {
		if e.Until.IsZero() {
			return // kept as long as the bucket keeps it
		}
		end := e.Until
		if e.Running {
			end = end.Add(w.recordLife) // an expired claim lives on as a released run
		}
		if end.After(last) {
			last = end
		}
	}
	streams.SetTTL(m, last.Sub(now))
}

// lookupUnit answers a unit from its group record alone, without a
// handler slot, as lookup answers a call from its key: from its record,
// busy while a live claim holds it or while its group does not decode,
// nil when it has to run or the group could not be read.
func (w *Worker) lookupUnit(ctx context.Context, req *records.WorkRequest, deadline time.Time) *records.WorkReply {
	gctx, cancel := context.WithTimeout(ctx, min(kvTimeout, time.Until(deadline)/2))
	defer cancel()
	key := unitKey(req)
	g, err := w.readGroup(gctx, streams.UnitGroupKey(req.BatchID))
	if errors.Is(err, errGroupUnreadable) {
		return unavailable(err)
	}
	if err != nil {
		return nil
	}
	i := g.find(key)
	if i < 0 {
		return nil
	}
	e, now := &g.entries[i], time.Now()
	switch {
	case !e.Live(now):
		return nil
	case e.Running:
		return busy(fmt.Sprintf("worker: %s is running on %s until %s", key, e.Worker, e.Until.Format(time.RFC3339Nano)))
	case e.Recorded() && e.Own:
		if rec, ok, _ := w.ownRecord(gctx, key); ok {
			return &records.WorkReply{Outputs: rec.Outputs, Recorded: true}
		}
		return nil
	case e.Recorded():
		return &records.WorkReply{Outputs: e.Outputs, Recorded: true}
	}
	return nil
}
