package authz

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
)

// errUnrecorded stops updateRecord when the batch has no record.
var errUnrecorded = errors.New("authz: batch not recorded")

// updateRecord applies change to the record of batch id with
// compare-and-set (streams.UpdateKV), and returns the record as written, or
// nil when change wrote nothing (it returned false). change may be called
// more than once (a lost race, or the remembered record was stale), so it
// must only change the record it is given, and report by variables it
// resets on each call. A batch without a
// record gives an error matching errUnrecorded; a record that does not
// decode, one matching ErrUnreadable.
func (s *Service) updateRecord(ctx context.Context, id uint64, change func(*streams.BatchRecord) (bool, error)) (*streams.BatchRecord, error) {
	if written, ok, err := s.updateRecent(ctx, id, change); ok {
		return written, err
	}
	var written *streams.BatchRecord
	// A finished batch's record is written with what is left of its age
	// (recordTTL): a write without one would keep it for ever.
	_, err := streams.UpdateKVTTL(ctx, s.js, s.batches, streams.BatchKey(id), func(cur []byte, exists bool) ([]byte, time.Duration, error) {
		written = nil
		if !exists {
			return nil, 0, fmt.Errorf("%w: %d", errUnrecorded, id)
		}
		rec, err := streams.Decode[streams.BatchRecord](cur)
		if err != nil {
			return nil, 0, unreadable(fmt.Sprintf("record of batch %d", id), rec.V, err)
		}
		if write, err := change(&rec); err != nil || !write {
			return nil, 0, err
		}
		data, err := streams.Encode(&rec)
		if err != nil {
			return nil, 0, err
		}
		written = &rec
		return data, s.recordTTL(&rec), nil
	})
	if err != nil {
		return nil, err
	}
	return written, nil
}

// recentRecord is a record this replica created: its encoding as written
// (bytes the collector does not scan), at the revision it wrote.
type recentRecord struct {
	data []byte
	rev  uint64
}

// recentRecords remembers the records this replica created, so the first
// change of each (usually its callback) can be written with
// compare-and-set on the revision it knows instead of reading the record
// first: one round trip less per batch. A record changed meanwhile by
// anyone makes that write fail, and the change is applied the usual way.
// Entries are taken on use; their bytes are bounded (maxRecentBytes).
type recentRecords struct {
	mu    sync.Mutex
	m     map[uint64]recentRecord
	bytes int
}

// maxRecentBytes bounds recentRecords: a backlog of submissions larger
// than this (about 90,000 records of one function) reads the oldest
// records back, as every other replica does.
const maxRecentBytes = 32 << 20

// recentOverhead is what an entry costs beside its bytes, roughly: the
// map's key, value and slot.
const recentOverhead = 64

func (r *recentRecords) put(id uint64, c *submit.Created) {
	size := len(c.Data) + recentOverhead
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[uint64]recentRecord{}
	}
	if old, ok := r.m[id]; ok {
		delete(r.m, id)
		r.bytes -= len(old.data) + recentOverhead
	}
	for r.bytes+size > maxRecentBytes && len(r.m) > 0 {
		for k, old := range r.m { // evict an arbitrary entry
			delete(r.m, k)
			r.bytes -= len(old.data) + recentOverhead
			break
		}
	}
	r.m[id] = recentRecord{data: c.Data, rev: c.Rev}
	r.bytes += size
}

// take forgets the record of batch id and returns it decoded, at the
// revision this replica wrote; ok is false when it is not remembered.
func (r *recentRecords) take(id uint64) (rec streams.BatchRecord, rev uint64, ok bool) {
	r.mu.Lock()
	rr, ok := r.m[id]
	if ok {
		delete(r.m, id)
		r.bytes -= len(rr.data) + recentOverhead
	}
	r.mu.Unlock()
	if !ok {
		return rec, 0, false
	}
	rec, err := streams.Decode[streams.BatchRecord](rr.data)
	if err != nil {
		return rec, 0, false // read back from the store instead
	}
	return rec, rr.rev, true
}

// updateRecent applies change to the remembered record of batch id and
// writes it with compare-and-set on the remembered revision. ok is false
// when there is nothing remembered or the record changed meanwhile: the
// caller then applies change to the record as stored.
func (s *Service) updateRecent(ctx context.Context, id uint64, change func(*streams.BatchRecord) (bool, error)) (written *streams.BatchRecord, ok bool, err error) {
	rec, rev, ok := s.recent.take(id)
	if !ok {
		return nil, false, nil
	}
	write, err := change(&rec)
	if err != nil || !write {
		return nil, false, nil // decide on the record as stored
	}
	data, err := streams.Encode(&rec)
	if err != nil {
		return nil, true, err
	}
	if ttl := s.recordTTL(&rec); ttl > 0 {
		_, err = streams.PutKeyTTL(ctx, s.js, streams.BucketBatches, streams.BatchKey(id), data, rev, ttl)
	} else {
		_, err = s.batches.Update(ctx, streams.BatchKey(id), data, rev)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, streams.ErrConflict) {
			return nil, false, nil
		}
		return nil, true, err
	}
	return &rec, true, nil
}
