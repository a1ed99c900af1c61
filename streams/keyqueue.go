package streams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

func (q *KeyQueue) version() uint8 { return q.V }
func (q *KeyQueue) setVersion()    { q.V = WireVersion }

// KeyQueueStore keeps the keys bucket: the one home of the per-key order's
// compare-and-set protocol. It is safe for concurrent use.
type KeyQueueStore struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// NewKeyQueueStore returns a store over the keys bucket; now stamps
// HeadSince (time.Now when nil).
func NewKeyQueueStore(kv jetstream.KeyValue, now func() time.Time) *KeyQueueStore {
	if now == nil {
		now = time.Now
	}
	return &KeyQueueStore{kv: kv, now: now}
}

// Append lists batch id behind the batches waiting on key of domain and
// returns the queue as it stands; id is the head when q.Head() == id. It
// is idempotent: added is false for an id listed already, which keeps its
// place, and for one among the recently released, which is not listed
// again.
func (s *KeyQueueStore) Append(ctx context.Context, domain, key string, id uint64) (q KeyQueue, added bool, err error) {
	q, err = s.update(ctx, domain, key, func(q *KeyQueue) bool {
		added = !slices.Contains(q.IDs, id) && !slices.Contains(q.Released, id)
		if !added {
			return false
		}
		if len(q.IDs) == 0 {
			q.HeadSince = s.now().UTC()
		}
		q.IDs = append(q.IDs, id)
		return true
	})
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
	w, err := s.kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("streams: list keys: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []KeyQueue
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("streams: list keys: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("streams: list keys: the watch stopped")
			}
			if e == nil { // every current value delivered
				return out, nil
			}
			q, err := Decode[KeyQueue](e.Value())
			if err != nil || len(q.IDs) == 0 {
				continue
			}
			out = append(out, q)
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
	return got, e.Revision(), nil
}

// KeyOrderMarkerTTL is how long the marker of an emptied key's order
// stays in the keys bucket before the server removes it.
const KeyOrderMarkerTTL = time.Second

// update applies change to key's order with compare-and-set, as UpdateKV
// does, deleting the entry when no id is left. change reports whether it
// changed anything worth writing, and may run more than once.
func (s *KeyQueueStore) update(ctx context.Context, domain, key string, change func(*KeyQueue) bool) (KeyQueue, error) {
	k := KeyQueueKey(domain, key)
	var last error
	for attempt := range CASAttempts {
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
		last = err
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 5)))
		select {
		case <-ctx.Done():
			return q, ctx.Err()
		case <-time.After(pause):
		}
	}
	return KeyQueue{Domain: domain, Key: key}, fmt.Errorf("%w: %s after %d attempts: %w", ErrConflict, k, CASAttempts, last)
}
