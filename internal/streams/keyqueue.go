package streams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KeyQueue is the order of one key of a domain, key KeyQueueKey(domain,
// key) of the keys bucket: the batches carrying that key that are not
// terminal yet, in the order authz accepted them. The first is the key's
// head, the only one of them with a queue token; the others get theirs
// when they become the head. A key with no batch waiting has no entry.
type KeyQueue struct {
	V      uint8  `msgpack:"v" json:"v"`
	Domain string `msgpack:"domain" json:"domain"`
	Key    string `msgpack:"key" json:"key"`
	// IDs are the waiting batches, the head first.
	IDs []uint64 `msgpack:"ids" json:"ids"`
	// By are the submitters of IDs, one for one; "" for a batch listed
	// before submitters were kept, or joined without one (AppendBy).
	By []string `msgpack:"by,omitempty" json:"by,omitempty"`
	// HeadSince is when IDs[0] became the head.
	HeadSince time.Time `msgpack:"head_since" json:"head_since"`
	// Released are the ids removed last, at most MaxReleased, newest last:
	// a late repeat of an admission (a retried submission, a resumed edit)
	// must not list a finished batch again.
	Released []uint64 `msgpack:"released,omitempty" json:"released,omitempty"`
}

// MaxReleased bounds KeyQueue.Released.
const MaxReleased = 16

// Head returns the key's head, 0 when none waits.
func (q *KeyQueue) Head() uint64 {
	if len(q.IDs) == 0 {
		return 0
	}
	return q.IDs[0]
}

// CountBy counts the batches of submitter by in the key's order, the head
// included.
func (q *KeyQueue) CountBy(by string) int {
	n := 0
	for _, b := range q.By {
		if b == by {
			n++
		}
	}
	return n
}

// SubmitterOf returns the submitter of the batch at place i of IDs.
func (q *KeyQueue) SubmitterOf(i int) string {
	if i < len(q.By) {
		return q.By[i]
	}
	return ""
}

// aligned makes By as long as IDs: an order written before submitters were
// kept has none.
func (q *KeyQueue) aligned() {
	switch {
	case len(q.By) < len(q.IDs):
		q.By = append(q.By, make([]string, len(q.IDs)-len(q.By))...)
	case len(q.By) > len(q.IDs):
		q.By = q.By[:len(q.IDs)]
	}
}

func (q *KeyQueue) version() uint8 { return q.V }
func (q *KeyQueue) setVersion()    { q.V = WireVersion }

// KeyQueueStore keeps the keys bucket: the one home of the per-key order's
// compare-and-set protocol. It is safe for concurrent use.
//
// Writes of one key take turns within a store (keyTurns): a burst of
// joins on one key would otherwise make every writer of the replica but
// one lose each compare-and-set, and the losers run out of tries under
// load the system itself makes. Taking turns leaves a write to contend
// only with the other replicas' writers of the key, one each at most, and
// a write tries again until it lands or its context ends: one that loses
// lost to a write that landed, so the key's order always moves on.
type KeyQueueStore struct {
	kv    jetstream.KeyValue
	now   func() time.Time
	turns keyTurns
}

// NewKeyQueueStore returns a store over the keys bucket; now stamps
// HeadSince (time.Now when nil).
func NewKeyQueueStore(kv jetstream.KeyValue, now func() time.Time) *KeyQueueStore {
	if now == nil {
		now = time.Now
	}
	return &KeyQueueStore{kv: kv, now: now, turns: keyTurns{lines: map[string]*keyTurn{}}}
}

// Append lists batch id behind the batches waiting on key of domain and
// returns the queue as it stands; id is the head when q.Head() == id. It
// is AppendBy with no submitter and no bound.
func (s *KeyQueueStore) Append(ctx context.Context, domain, key string, id uint64) (q KeyQueue, added bool, err error) {
	return s.AppendBy(ctx, domain, key, id, "", 0)
}

// AppendBy lists batch id of submitter by behind the batches waiting on key
// of domain and returns the queue as it stands; id is the head when
// q.Head() == id. It is idempotent: added is false for an id listed
// already, which keeps its place, and for one among the recently
// released, which is not listed again. With bound > 0, an id that by's
// batches listed already reach bound is not listed: the error matches
// ErrKeyBound, and q is the order that refused it. The bound is checked in
// the same compare-and-set as the append, so concurrent joins cannot
// exceed it.
func (s *KeyQueueStore) AppendBy(ctx context.Context, domain, key string, id uint64, by string, bound int) (q KeyQueue, added bool, err error) {
	full := false
	q, err = s.update(ctx, domain, key, func(q *KeyQueue) bool {
		added = !slices.Contains(q.IDs, id) && !slices.Contains(q.Released, id)
		full = added && bound > 0 && q.CountBy(by) >= bound
		if !added || full {
			added = false
			return false
		}
		if len(q.IDs) == 0 {
			q.HeadSince = s.now().UTC()
		}
		q.IDs = append(q.IDs, id)
		q.By = append(q.By, by)
		return true
	})
	if err == nil && full {
		err = fmt.Errorf("%w: %q has %d batches on key %q, its bound", ErrKeyBound, by, q.CountBy(by), key)
	}
	return q, added, err
}

// Remove takes batch id off key's order and returns the queue as it
// stands; at is where id stood (0: it was the head), -1 when it was not
// listed. Removing the last id deletes the entry.
func (s *KeyQueueStore) Remove(ctx context.Context, domain, key string, id uint64) (q KeyQueue, at int, err error) {
	q, err = s.update(ctx, domain, key, func(q *KeyQueue) bool {
		i := slices.Index(q.IDs, id)
		at = i
		if i < 0 {
			return false
		}
		q.IDs = slices.Delete(q.IDs, i, i+1)
		q.By = slices.Delete(q.By, i, i+1)
		if i == 0 {
			q.HeadSince = s.now().UTC()
		}
		q.Released = append(q.Released, id)
		if n := len(q.Released) - MaxReleased; n > 0 {
			q.Released = slices.Delete(q.Released, 0, n)
		}
		return true
	})
	return q, at, err
}

// Load reads key's order; a key nobody waits on gives an empty queue.
func (s *KeyQueueStore) Load(ctx context.Context, domain, key string) (KeyQueue, error) {
	q, _, err := s.load(ctx, domain, key)
	return q, err
}

// List returns the orders of every key of domain with a batch waiting, in
// no particular order. Entries that do not decode are skipped.
func (s *KeyQueueStore) List(ctx context.Context, domain string) ([]KeyQueue, error) {
	return s.list(ctx, KeyQueueFilter(domain))
}

// ListAll returns the orders of every key of every domain, as List.
func (s *KeyQueueStore) ListAll(ctx context.Context) ([]KeyQueue, error) {
	return s.list(ctx, jetstream.AllKeys)
}

func (s *KeyQueueStore) list(ctx context.Context, filter string) ([]KeyQueue, error) {
	var out []KeyQueue
	err := eachValue(ctx, s.kv, filter, "list keys", func(e jetstream.KeyValueEntry) {
		q, err := Decode[KeyQueue](e.Value())
		if err != nil || len(q.IDs) == 0 {
			return
		}
		q.aligned()
		out = append(out, q)
	})
	return out, err
}

// eachValue calls f with every current value of kv under filter, read with
// one watch that ends once the server has delivered them; what says what
// the caller was doing, in errors.
func eachValue(ctx context.Context, kv jetstream.KeyValue, filter, what string, f func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("streams: %s: %w", what, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("streams: %s: %w", what, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return fmt.Errorf("streams: %s: the watch stopped", what)
			}
			if e == nil { // every current value delivered
				return nil
			}
			f(e)
		}
	}
}

func (s *KeyQueueStore) load(ctx context.Context, domain, key string) (KeyQueue, uint64, error) {
	q := KeyQueue{Domain: domain, Key: key}
	e, err := s.kv.Get(ctx, KeyQueueKey(domain, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return q, 0, nil
	}
	if err != nil {
		return q, 0, fmt.Errorf("streams: read the order of key %q: %w", key, err)
	}
	got, err := Decode[KeyQueue](e.Value())
	if err != nil {
		return q, 0, fmt.Errorf("streams: the order of key %q: %w", key, err)
	}
	if got.Domain != domain || got.Key != key {
		return q, 0, fmt.Errorf("%w: the order stored under %s names key %q of %q", ErrDecode, KeyQueueKey(domain, key), got.Key, got.Domain)
	}
	got.aligned()
	return got, e.Revision(), nil
}

// KeyOrderMarkerTTL is how long the marker of an emptied key's order
// stays in the keys bucket before the server removes it.
const KeyOrderMarkerTTL = time.Second

// update applies change to key's order with compare-and-set, as UpdateKV
// does, deleting the entry when no id is left. change reports whether it
// changed anything worth writing, and may run more than once. The store's
// writes of one key take turns, and a write lost to another replica's is
// tried again, with a short random pause, until it lands or ctx ends.
func (s *KeyQueueStore) update(ctx context.Context, domain, key string, change func(*KeyQueue) bool) (KeyQueue, error) {
	k := KeyQueueKey(domain, key)
	done, err := s.turns.take(ctx, k)
	if err != nil {
		return KeyQueue{Domain: domain, Key: key}, fmt.Errorf("streams: wait for a turn to write the order of key %q: %w", key, err)
	}
	defer done()
	for attempt := 0; ; attempt++ {
		q, rev, err := s.load(ctx, domain, key)
		if err != nil {
			return q, err
		}
		if !change(&q) {
			return q, nil
		}
		switch {
		case len(q.IDs) == 0 && rev == 0:
			return q, nil
		case len(q.IDs) == 0:
			// The released ids go with the entry: a repeated admission
			// reads its batch record again once listed, and takes a
			// finished batch off at once. A purge whose marker expires
			// leaves nothing behind: keys are the callers' to choose,
			// and a bucket of markers would grow with every key ever
			// used.
			err = s.kv.Purge(ctx, k, jetstream.LastRevision(rev), jetstream.PurgeTTL(KeyOrderMarkerTTL))
		default:
			var v []byte
			if v, err = Encode(&q); err != nil {
				return q, err
			}
			if rev == 0 {
				_, err = s.kv.Create(ctx, k, v)
			} else {
				_, err = s.kv.Update(ctx, k, v, rev)
			}
		}
		if err == nil {
			return q, nil
		}
		if !isConflict(err) {
			return q, fmt.Errorf("streams: write the order of key %q: %w", key, err)
		}
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, keyPauseDoublings)))
		select {
		case <-ctx.Done():
			return KeyQueue{Domain: domain, Key: key}, fmt.Errorf("%w: %s, %d attempts before the request ended: %w; %w", ErrConflict, k, attempt+1, ctx.Err(), err)
		case <-time.After(pause):
		}
	}
}

// keyPauseDoublings bounds the pause after a lost write of a key's order
// at a random part of 1ms << keyPauseDoublings: only the other replicas'
// writers of the key compete, so the pause need not grow long.
const keyPauseDoublings = 4

// keyTurns lets the writes of one key in a store take turns, first come
// first served; a key nobody writes has no entry.
type keyTurns struct {
	mu    sync.Mutex
	lines map[string]*keyTurn
}

type keyTurn struct {
	turn  chan struct{} // holds a value while a write runs
	users int           // writes running or waiting
}

// take waits for k's turn; done ends it.
func (t *keyTurns) take(ctx context.Context, k string) (done func(), err error) {
	t.mu.Lock()
	l := t.lines[k]
	if l == nil {
		l = &keyTurn{turn: make(chan struct{}, 1)}
		t.lines[k] = l
	}
	l.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if l.users--; l.users == 0 {
			delete(t.lines, k)
		}
		t.mu.Unlock()
	}
	select {
	case l.turn <- struct{}{}:
		return func() { <-l.turn; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}
