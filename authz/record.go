package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/streams"
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
	_, err := streams.UpdateKV(ctx, s.batches, streams.BatchKey(id), func(cur []byte, exists bool) ([]byte, error) {
		written = nil
		if !exists {
			return nil, fmt.Errorf("%w: %d", errUnrecorded, id)
		}
		rec, err := streams.Decode[streams.BatchRecord](cur)
		if err != nil {
			return nil, unreadable(fmt.Sprintf("record of batch %d", id), rec.V, err)
		}
		if write, err := change(&rec); err != nil || !write {
			return nil, err
		}
		data, err := streams.Encode(&rec)
		if err != nil {
			return nil, err
		}
		written = &rec
		return data, nil
	})
	if err != nil {
		return nil, err
	}
	return written, nil
}

// recentRecord is a record this replica created, at the revision it wrote.
type recentRecord = submit.Created

// recentRecords remembers the records this replica created, so the first
// change of each (usually its callback) can be written with
// compare-and-set on the revision it knows instead of reading the record
// first: one round trip less per batch. A record changed meanwhile by
// anyone makes that write fail, and the change is applied the usual way.
// Entries are taken on use; the map is bounded.
type recentRecords struct {
	mu sync.Mutex
	m  map[uint64]*recentRecord
}

// maxRecent bounds recentRecords: a burst of submissions larger than this
// reads the oldest records back, as every other replica does.
const maxRecent = 1 << 15

func (r *recentRecords) put(id uint64, rr *recentRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[uint64]*recentRecord{}
	}
	if len(r.m) >= maxRecent {
		for k := range r.m { // evict an arbitrary entry
			delete(r.m, k)
			break
		}
	}
	r.m[id] = rr
}

func (r *recentRecords) take(id uint64) (*recentRecord, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr, ok := r.m[id]
	delete(r.m, id)
	return rr, ok
}

// updateRecent applies change to the remembered record of batch id and
// writes it with compare-and-set on the remembered revision. ok is false
// when there is nothing remembered or the record changed meanwhile: the
// caller then applies change to the record as stored.
func (s *Service) updateRecent(ctx context.Context, id uint64, change func(*streams.BatchRecord) (bool, error)) (written *streams.BatchRecord, ok bool, err error) {
	rr, ok := s.recent.take(id)
	if !ok {
		return nil, false, nil
	}
	rec := rr.Rec
	rec.History = slices.Clip(rec.History) // change appends: never into the remembered array
	write, err := change(&rec)
	if err != nil || !write {
		return nil, false, nil // decide on the record as stored
	}
	data, err := streams.Encode(&rec)
	if err != nil {
		return nil, true, err
	}
	if _, err := s.batches.Update(ctx, streams.BatchKey(id), data, rr.Rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			return nil, false, nil
		}
		return nil, true, err
	}
	return &rec, true, nil
}
