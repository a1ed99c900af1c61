package authz

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/logging"
)

// A send whose batch was recorded but whose token could not be published
// (the queue's stream unavailable for a moment) must not leave the batch
// recorded and queued nowhere, holding its label's slot, nor its key stuck
// until the next authz start. The batch without a key, or the key whose
// head it became, is handed to the replica's repair loop, which gives it
// its first token with backoff until it takes, unless it ran or finished
// meanwhile (a cancel). The publish is deduplicated by the queue's
// duplicate window, so a token the failed publish stored after all is not
// doubled. A replica that stops first leaves a key to the next start's
// resumeKeys, and a batch without a key to the next start's resumeRecent
// if that start comes within the queues' duplicate window, as one whose
// authz died between its record and its token.
//
// A keyed batch whose join of its key's order failed (the keys bucket
// unavailable, or the request's time out while the key was contended) is
// handed over as well, and joined (admit, as a repeat) with the same
// backoff: it is recorded, and must not stay outside every order holding
// its label's slot.

// repairBound bounds the keys, and apart from them the batches, waiting for
// repair in one replica: beyond it a key waits for the next start, and a
// batch stays recorded and unqueued (until a start within the duplicate
// window, resumeRecent), and its send says so.
const repairBound = 1024

// repairTry bounds one try of the repair loop, so that a key or batch
// whose stream does not answer holds back the others at most this long.
const repairTry = 10 * time.Second

// Backoff of the repair loop, per key or batch: from keyRepairFirst
// doubling to keyRepairMax.
const (
	keyRepairFirst = 250 * time.Millisecond
	keyRepairMax   = 5 * time.Second
)

// repairRef names one key's order or, with no key, one batch; with both,
// a batch to join its key's order.
type repairRef struct {
	domain, key string
	id          uint64 // the batch, when key is empty or it is to join
}

// repairs holds what waits for the repair loop: each key or batch once,
// each with its own backoff, so that one that cannot be repaired yet does
// not hold back the others.
type repairs struct {
	mu      sync.Mutex
	open    bool // the loop runs: hand-overs are taken
	pending map[repairRef]*repairWait
	wake    chan struct{}
}

type repairWait struct {
	wait time.Duration
	at   time.Time
	// handed counts the hand-overs: one that comes while a try runs makes
	// the loop try again, since the try may have read the state before it.
	handed uint64
}

// setOpen says whether the loop takes hand-overs.
func (rs *repairs) setOpen(open bool) {
	rs.mu.Lock()
	rs.open = open
	rs.mu.Unlock()
}

// add hands r to the loop; false when the loop does not run or too many
// of r's kind wait.
func (rs *repairs) add(r repairRef) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.open {
		return false
	}
	if w, ok := rs.pending[r]; ok {
		w.handed++
		return true
	}
	// Hand-overs follow failures only: counting them here costs nothing
	// on the way of a send that succeeds.
	n := 0
	for p := range rs.pending {
		if (p.key == "") == (r.key == "") {
			n++
		}
	}
	if n >= repairBound {
		return false
	}
	rs.pending[r] = &repairWait{wait: keyRepairFirst, at: time.Now()}
	select {
	case rs.wake <- struct{}{}:
	default:
	}
	return true
}

// done takes r off the pending set after a try that began when r had been
// handed over handed times; handed over again since, it is tried again now.
func (rs *repairs) done(r repairRef, handed uint64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	w, ok := rs.pending[r]
	if !ok {
		return
	}
	if w.handed != handed {
		w.at, w.wait = time.Now(), keyRepairFirst
		return
	}
	delete(rs.pending, r)
}

// dueRepair is one key or batch due, and its hand-overs when it was found.
type dueRepair struct {
	repairRef
	handed uint64
}

// due returns what is due now.
func (rs *repairs) due(now time.Time) (due []dueRepair) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for r, w := range rs.pending {
		if !w.at.After(now) {
			due = append(due, dueRepair{r, w.handed})
		}
	}
	return due
}

// next returns when the next try is due; ok is false when nothing waits.
func (rs *repairs) next() (at time.Time, ok bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, w := range rs.pending {
		if !ok || w.at.Before(at) {
			at, ok = w.at, true
		}
	}
	return at, ok
}

// later backs r off, and returns how long it waits.
func (rs *repairs) later(r repairRef, now time.Time) time.Duration {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	w, ok := rs.pending[r]
	if !ok {
		return 0
	}
	wait := w.wait
	w.at, w.wait = now.Add(wait), min(2*wait, keyRepairMax)
	return wait
}

// errNotHanded marks an error after which the repair loop did not take
// what it should repair.
var errNotHanded = errors.New("not handed to the repair loop")

// errJoinLater marks an error after which a keyed batch, recorded, has not
// joined its key's order, and the repair loop joins it.
var errJoinLater = errors.New("handed to the repair loop to join its key's order")

// keyRepairer is the repair loop: it gives the keys' heads, and the
// batches, that a failed send or a crash left without a token their token,
// and joins keyed batches left outside their key's order.
type keyRepairer struct {
	repairs repairs
	keys    *keyOrders
	order   *keyorder.Store
	store   *recordStore
	log     *slog.Logger
}

// repairJoin hands a keyed batch that may not have joined its key's order
// to the repair loop; false when it is not taken.
func (kr *keyRepairer) repairJoin(domain, key string, id uint64) bool {
	if !kr.repairs.add(repairRef{domain: domain, key: key, id: id}) {
		kr.log.Error("batch left recorded and outside its key's order: its repair is not taken (too many wait, or authz stops)", "domain", domain, "key", logging.Capped(key), "batch_id", id)
		return false
	}
	return true
}

// repairKey hands a key whose head may lack its token to the repair loop;
// false when it is not taken.
func (kr *keyRepairer) repairKey(domain, key string) bool {
	if !kr.repairs.add(repairRef{domain: domain, key: key}) {
		kr.log.Error("key left for the next start: its repair is not taken (too many wait, or authz stops)", "domain", domain, "key", logging.Capped(key))
		return false
	}
	return true
}

// repairBatch hands a batch without a key, recorded and perhaps without
// its token, to the repair loop; false when it is not taken.
func (kr *keyRepairer) repairBatch(domain string, id uint64) bool {
	if !kr.repairs.add(repairRef{domain: domain, id: id}) {
		kr.log.Error("batch left recorded and unqueued: its repair is not taken (too many wait, or authz stops)", "domain", domain, "batch_id", id)
		return false
	}
	return true
}

// run runs until ctx is done, giving each handed key's head, or
// batch, its token (ensureHead, ensureQueued): each due one is tried in
// turn, and one that fails is tried again after its backoff. Batches
// still waiting when it stops are logged: nothing else will queue them.
func (kr *keyRepairer) run(ctx context.Context) error {
	rs := &kr.repairs
	rs.setOpen(true)
	defer func() {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		rs.open = false
		for r := range rs.pending {
			switch {
			case r.key == "":
				kr.log.Error("batch left recorded and unqueued: authz stopped before it could queue it", "domain", r.domain, "batch_id", r.id)
			case r.id != 0:
				kr.log.Error("batch left recorded and outside its key's order: authz stopped before it could join it", "domain", r.domain, "key", logging.Capped(r.key), "batch_id", r.id)
			default:
				kr.log.Warn("key left for the next start: authz stopped before it could repair it", "domain", r.domain, "key", logging.Capped(r.key))
			}
		}
		clear(rs.pending)
	}()
	for {
		now := time.Now()
		for _, d := range rs.due(now) {
			if ctx.Err() != nil {
				return nil
			}
			r := d.repairRef
			tctx, cancel := context.WithTimeout(ctx, repairTry)
			err := kr.repair(tctx, r)
			cancel()
			if ctx.Err() != nil {
				return nil // the try may have been cut short: say nothing of it
			}
			if err != nil {
				wait := rs.later(r, time.Now())
				switch {
				case r.key == "":
					kr.log.Warn("batch not queued yet", "domain", r.domain, "batch_id", r.id, "retry_in", wait, "err", err)
				case r.id != 0:
					kr.log.Warn("batch not in its key's order yet", "domain", r.domain, "key", logging.Capped(r.key), "batch_id", r.id, "retry_in", wait, "err", err)
				default:
					kr.log.Warn("key head not repaired yet", "domain", r.domain, "key", logging.Capped(r.key), "retry_in", wait, "err", err)
				}
				continue
			}
			rs.done(r, d.handed)
			switch {
			case r.key == "":
				kr.log.Info("batch queued after its send failed", "domain", r.domain, "batch_id", r.id)
			case r.id != 0:
				kr.log.Info("batch joined its key's order after its send failed", "domain", r.domain, "key", logging.Capped(r.key), "batch_id", r.id)
			default:
				kr.log.Info("key head repaired", "domain", r.domain, "key", logging.Capped(r.key))
			}
		}
		var timer <-chan time.Time
		if at, ok := rs.next(); ok {
			timer = time.After(time.Until(at))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-rs.wake:
		case <-timer:
		}
	}
}

// repair gives r its token: a key's head, or a batch; or joins a batch to
// its key's order.
func (kr *keyRepairer) repair(ctx context.Context, r repairRef) error {
	switch {
	case r.key == "":
		return kr.ensureQueued(ctx, r.domain, r.id)
	case r.id != 0:
		return kr.rejoin(ctx, r)
	}
	return kr.repairHead(ctx, r)
}

// rejoin joins batch r.id to its key's order as a repeated admission
// does: a batch finished meanwhile (a cancel) is not listed, one listed
// already keeps its place, and the key's head gets its token.
func (kr *keyRepairer) rejoin(ctx context.Context, r repairRef) error {
	rec, err := kr.store.record(ctx, r.id)
	var ae *Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
		kr.log.Error("a batch to join its key's order has no record: nothing to join", "domain", r.domain, "batch_id", r.id)
		return nil
	case err != nil:
		return err
	}
	_, err = kr.keys.admit(ctx, &rec.Batch, true, 0)
	return err
}

// repairHead gives k's current head its token if it never ran.
func (kr *keyRepairer) repairHead(ctx context.Context, k repairRef) error {
	q, err := kr.order.Load(ctx, k.domain, k.key)
	if err != nil {
		return err
	}
	if q.Head() == 0 {
		return nil
	}
	return kr.keys.ensureHead(ctx, k.domain, k.key, q.Head())
}

// ensureQueued gives batch id, without a key, its first token if it is
// recorded, not finished, and never ran (startIfNeverRan).
func (kr *keyRepairer) ensureQueued(ctx context.Context, domain string, id uint64) error {
	rec, err := kr.store.record(ctx, id)
	var ae *Error
	switch {
	case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
		kr.log.Error("a batch to queue has no record: nothing to queue", "domain", domain, "batch_id", id)
		return nil
	case err != nil:
		return err
	case rec.Status.Terminal():
		return nil
	}
	_, err = kr.keys.startIfNeverRan(ctx, &rec.Batch)
	return err
}
