package streams

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
)

// ProgressEntry is a progress record and the revision it was read at; a
// zero Rev means there is none yet, and the next Save creates it.
type ProgressEntry struct {
	records.Progress
	Rev uint64
}

// ProgressStore loads and saves the progress records of the progress
// bucket with compare-and-set: the one home of that protocol for authz and
// the processors. It is safe for concurrent use.
type ProgressStore struct {
	kv  jetstream.KeyValue
	now func() time.Time
	// js and retention, when set (Expire), give a done record its time
	// to live.
	js        jetstream.JetStream
	retention Retention
}

// NewProgressStore returns a store over the progress bucket; now stamps
// UpdatedAt (time.Now when nil).
func NewProgressStore(kv jetstream.KeyValue, now func() time.Time) *ProgressStore {
	if now == nil {
		now = time.Now
	}
	return &ProgressStore{kv: kv, now: now}
}

// Expire makes every record this store writes done expire after r's age
// (ReadRetention of the progress bucket), written through js; call it
// before the store is used.
func (s *ProgressStore) Expire(js jetstream.JetStream, r Retention) {
	s.js, s.retention = js, r
}

// Load reads the progress of batch id of domain. A batch without a record
// gets a fresh Queued entry with Rev 0. A record that does not decode gives
// an error matching records.ErrDecode (or records.ErrVersion) together
// with a fresh Queued entry holding the record's revision, so that it can
// be overwritten.
func (s *ProgressStore) Load(ctx context.Context, domain string, id uint64) (*ProgressEntry, error) {
	e, err := s.kv.Get(ctx, ProgressKey(domain, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &ProgressEntry{Progress: records.Progress{BatchID: id, State: records.Queued}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("streams: read progress of batch %d: %w", id, err)
	}
	p, err := records.Decode[records.Progress](e.Value())
	if err != nil {
		return &ProgressEntry{Progress: records.Progress{BatchID: id, State: records.Queued}, Rev: e.Revision()},
			fmt.Errorf("streams: progress record of batch %d: %w", id, err)
	}
	return &ProgressEntry{Progress: p, Rev: e.Revision()}, nil
}

// Save writes e with compare-and-set on the revision it was read at
// (creating the record when Rev is 0), stamps UpdatedAt in UTC and updates
// Rev. Another writer's change in between gives an error matching
// ErrConflict, with the store's cause kept in the chain.
func (s *ProgressStore) Save(ctx context.Context, domain string, e *ProgressEntry) error {
	e.UpdatedAt = s.now().UTC()
	v, err := records.Encode(&e.Progress)
	if err != nil {
		return err
	}
	key := ProgressKey(domain, e.BatchID)
	var ttl time.Duration
	if e.State == records.Done && s.js != nil {
		// The batch finished now: its progress goes with the rest of
		// its records. No write follows a done one but another done one.
		ttl = s.retention.TTL(e.UpdatedAt, e.UpdatedAt, false)
	}
	rev, err := writeKV(ctx, s.js, s.kv, key, v, e.Rev, ttl)
	if IsConflict(err) {
		return fmt.Errorf("%w: progress of batch %d: %w", ErrConflict, e.BatchID, err)
	}
	if err != nil {
		return fmt.Errorf("streams: write progress of batch %d: %w", e.BatchID, err)
	}
	e.Rev = rev
	return nil
}

// IsConflict reports whether err is a compare-and-set that lost: the key
// exists already (a create), or its revision moved on (an update), or a
// write matching ErrConflict.
func IsConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, ErrConflict)
}

// writeKV writes key with compare-and-set on rev (0: create), with a
// time to live when ttl > 0 (through js, which must then be set).
func writeKV(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, v []byte, rev uint64, ttl time.Duration) (uint64, error) {
	switch {
	case rev == 0 && ttl > 0:
		return kv.Create(ctx, key, v, jetstream.KeyTTL(ttl))
	case rev == 0:
		return kv.Create(ctx, key, v)
	case ttl > 0:
		return PutKeyTTL(ctx, js, kv.Bucket(), key, v, rev, ttl)
	}
	return kv.Update(ctx, key, v, rev)
}

// CASAttempts is how often UpdateKV tries before it gives up: enough for
// every writer of a hot key (a label's slots, a batch record receiving its
// callback while the owner edits it) to get its turn.
const CASAttempts = 20

// UpdateKV applies change to key of kv with compare-and-set, reading the
// current value again and calling change anew each time another writer got
// there first, at most CASAttempts times. change gets the current value
// (nil and false when the key does not exist) and returns the value to
// write; returning a nil value with a nil error writes nothing (the key is
// already as wanted). Between attempts it pauses a random moment (up to
// 32 ms), so that writers of one hot key do not keep colliding. The revision written is returned (0 when nothing was
// written). When every attempt lost, the error matches ErrConflict; an
// error from change is returned as it is.
func UpdateKV(ctx context.Context, kv jetstream.KeyValue, key string, change func(cur []byte, exists bool) ([]byte, error)) (uint64, error) {
	return UpdateKVTTL(ctx, nil, kv, key, func(cur []byte, exists bool) ([]byte, time.Duration, error) {
		next, err := change(cur, exists)
		return next, 0, err
	})
}

// UpdateKVTTL is UpdateKV whose change also says the written value's time
// to live (0: none), written through js (needed only for a ttl).
func UpdateKVTTL(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, change func(cur []byte, exists bool) ([]byte, time.Duration, error)) (uint64, error) {
	var last error
	for attempt := range CASAttempts {
		var cur []byte
		var rev uint64
		e, err := kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return 0, err
		default:
			cur, rev = e.Value(), e.Revision()
		}
		next, ttl, err := change(cur, rev != 0)
		if err != nil || next == nil {
			return 0, err
		}
		rev, err = writeKV(ctx, js, kv, key, next, rev, ttl)
		if err == nil {
			return rev, nil
		}
		if !IsConflict(err) {
			return 0, err
		}
		last = err
		// Many writers of one hot key (a label's slots) lose to each other
		// in lockstep: a short random pause spreads them out.
		pause := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 5)))
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pause):
		}
	}
	return 0, fmt.Errorf("%w: %s after %d attempts: %w", ErrConflict, key, CASAttempts, last)
}

// EachValue calls f with every current value of kv under filter, read with
// one watch that ends once the server has delivered them; what says what
// the caller was doing, in errors.
func EachValue(ctx context.Context, kv jetstream.KeyValue, filter, what string, f func(jetstream.KeyValueEntry)) error {
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
