package keyorder

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// Store keeps the keys bucket: the one home of the per-key order's
// compare-and-set protocol. It is safe for concurrent use.
//
// Writes of one key take turns within a store (keyTurns): a burst of
// joins on one key would otherwise make every writer of the replica but
// one lose each compare-and-set, and the losers run out of tries under
// load the system itself makes. Taking turns leaves a write to contend
// only with the other replicas' writers of the key, one each at most, and
// a write tries again until it lands or its context ends: one that loses
// lost to a write that landed, so the key's order always moves on.
type Store struct {
	kv    jetstream.KeyValue
	now   func() time.Time
	turns keyTurns
}

// New returns a store over the keys bucket; now stamps HeadSince
// (time.Now when nil).
func New(kv jetstream.KeyValue, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{kv: kv, now: now, turns: keyTurns{lines: map[string]*keyTurn{}}}
}

// Append lists batch id behind the batches waiting on key of domain and
// returns the queue as it stands; id is the head when q.Head() == id. It
// is AppendBy with no submitter and no bound.
func (s *Store) Append(ctx context.Context, domain, key string, id uint64) (q records.KeyQueue, added bool, err error) {
	return s.AppendBy(ctx, domain, key, id, "", 0)
}

// AppendBy lists batch id of submitter by behind the batches waiting on key
// of domain and returns the queue as it stands; id is the head when
// q.Head() == id. It is idempotent: added is false for an id listed
// already, which keeps its place, and for one among the recently
// released, which is not listed again. With bound > 0, an id that by's
// batches listed already reach bound is not listed: the error matches
// ErrBound, and q is the order that refused it. The bound is checked in
// the same compare-and-set as the append, so concurrent joins cannot
// exceed it.
func (s *Store) AppendBy(ctx context.Context, domain, key string, id uint64, by string, bound int) (q records.KeyQueue, added bool, err error) {
	full := false
	q, err = s.update(ctx, domain, key, func(q *records.KeyQueue) bool {
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
		err = fmt.Errorf("%w: %q has %d batches on key %q, its bound", ErrBound, by, q.CountBy(by), key)
	}
	return q, added, err
}

// Remove takes batch id off key's order and returns the queue as it
// stands; at is where id stood (0: it was the head), -1 when it was not
// listed. Removing the last id deletes the entry.
func (s *Store) Remove(ctx context.Context, domain, key string, id uint64) (q records.KeyQueue, at int, err error) {
	q, err = s.update(ctx, domain, key, func(q *records.KeyQueue) bool {
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
		if n := len(q.Released) - records.MaxReleased; n > 0 {
			q.Released = slices.Delete(q.Released, 0, n)
		}
		return true
	})
	return q, at, err
}

// Load reads key's order; a key nobody waits on gives an empty queue.
func (s *Store) Load(ctx context.Context, domain, key string) (records.KeyQueue, error) {
	q, _, err := s.load(ctx, domain, key)
	return q, err
}

// List returns the orders of every key of domain with a batch waiting, in
// no particular order. Entries that do not decode are skipped.
func (s *Store) List(ctx context.Context, domain string) ([]records.KeyQueue, error) {
	return s.list(ctx, streams.KeyQueueFilter(domain))
}

// ListAll returns the orders of every key of every domain, as List.
func (s *Store) ListAll(ctx context.Context) ([]records.KeyQueue, error) {
	return s.list(ctx, jetstream.AllKeys)
}

func (s *Store) list(ctx context.Context, filter string) ([]records.KeyQueue, error) {
	var out []records.KeyQueue
	err := streams.EachValue(ctx, s.kv, filter, "list keys", func(e jetstream.KeyValueEntry) {
		q, err := records.Decode[records.KeyQueue](e.Value())
		if err != nil || len(q.IDs) == 0 {
			return
		}
		align(&q)
		out = append(out, q)
	})
	return out, err
}

func (s *Store) load(ctx context.Context, domain, key string) (records.KeyQueue, uint64, error) {
	q := records.KeyQueue{Domain: domain, Key: key}
	e, err := s.kv.Get(ctx, streams.KeyQueueKey(domain, key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return q, 0, nil
	}
	if err != nil {
		return q, 0, fmt.Errorf("keyorder: read the order of key %q: %w", key, err)
	}
	got, err := records.Decode[records.KeyQueue](e.Value())
	if err != nil {
		return q, 0, fmt.Errorf("keyorder: the order of key %q: %w", key, err)
	}
	if got.Domain != domain || got.Key != key {
		return q, 0, fmt.Errorf("%w: the order stored under %s names key %q of %q", records.ErrDecode, streams.KeyQueueKey(domain, key), got.Key, got.Domain)
	}
	align(&got)
	return got, e.Revision(), nil
}

// MarkerTTL is how long the marker of an emptied key's order stays in the
// keys bucket before the server removes it.
const MarkerTTL = time.Second

// update applies change to key's order with compare-and-set, as
// streams.UpdateKV does, deleting the entry when no id is left. change reports whether it
// changed anything worth writing, and may run more than once. The store's
// writes of one key take turns, and a write lost to another replica's is
// tried again, with a short random pause, until it lands or ctx ends.
func (s *Store) update(ctx context.Context, domain, key string, change func(*records.KeyQueue) bool) (records.KeyQueue, error) {
	k := streams.KeyQueueKey(domain, key)
	done, err := s.turns.take(ctx, k)
	if err != nil {
		return records.KeyQueue{Domain: domain, Key: key}, fmt.Errorf("keyorder: wait for a turn to write the order of key %q: %w", key, err)
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
			err = s.kv.Purge(ctx, k, jetstream.LastRevision(rev), jetstream.PurgeTTL(MarkerTTL))
		default:
			var v []byte
			if v, err = records.Encode(&q); err != nil {
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
		if !streams.IsConflict(err) {
			return q, fmt.Errorf("keyorder: write the order of key %q: %w", key, err)
		}
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, keyPauseDoublings)))
		select {
		case <-ctx.Done():
			return records.KeyQueue{Domain: domain, Key: key}, fmt.Errorf("%w: %s, %d attempts before the request ended: %w; %w", streams.ErrConflict, k, attempt+1, ctx.Err(), err)
		case <-time.After(pause):
		}
	}
}

// align makes By as long as IDs: an order written before submitters were
// kept has none.
func align(q *records.KeyQueue) {
	switch {
	case len(q.By) < len(q.IDs):
		q.By = append(q.By, make([]string, len(q.IDs)-len(q.By))...)
	case len(q.By) > len(q.IDs):
		q.By = q.By[:len(q.IDs)]
	}
}

// keyPauseDoublings bounds the pause after a lost write of a key's order
// at a random part of 1ms << keyPauseDoublings: only the other replicas'
// writers of the key compete, so the pause need not grow long.
const keyPauseDoublings = 4
