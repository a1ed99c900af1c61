package authz

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// recordStore reads and writes batch records and their idempotency keys,
// and knows how long a finished batch's records are kept (retention.go).
type recordStore struct {
	js      jetstream.JetStream
	batches jetstream.KeyValue
	// acks publishes the idempotency key's rewrite (expireKeys).
	acks *jsapi.AckPublisher
	// progress is read beside a record to show a running batch (batch).
	progress *streams.ProgressStore
	// owner may read every batch's record; others only their own.
	owner string
	now   func() time.Time
	// recent remembers the records this replica created (updateRecent).
	recent recentRecords
	// retention is how long a finished batch's records are kept.
	retention streams.Retention
	// idsWindow is the id log's duplicate window (the system's): an
	// idempotency key lives at least that long after its submission.
	idsWindow time.Duration
}

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
func (rs *recordStore) updateRecord(ctx context.Context, id uint64, change func(*records.BatchRecord) (bool, error)) (*records.BatchRecord, error) {
	if written, ok, err := rs.updateRecent(ctx, id, change); ok {
		return written, err
	}
	var written *records.BatchRecord
	// A finished batch's record is written with what is left of its age
	// (recordTTL): a write without one would keep it for ever.
	_, err := streams.UpdateKVTTL(ctx, rs.js, rs.batches, streams.BatchKey(id), func(cur []byte, exists bool) ([]byte, time.Duration, error) {
		written = nil
		if !exists {
			return nil, 0, fmt.Errorf("%w: %d", errUnrecorded, id)
		}
		rec, err := records.Decode[records.BatchRecord](cur)
		if err != nil {
			return nil, 0, unreadable(fmt.Sprintf("record of batch %d", id), rec.V, err)
		}
		if write, err := change(&rec); err != nil || !write {
			return nil, 0, err
		}
		data, err := records.Encode(&rec)
		if err != nil {
			return nil, 0, err
		}
		if err := rs.keyBeforeTerminal(ctx, &rec); err != nil {
			return nil, 0, err
		}
		written = &rec
		return data, rs.recordTTL(&rec), nil
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
func (r *recentRecords) take(id uint64) (rec records.BatchRecord, rev uint64, ok bool) {
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
	rec, err := records.Decode[records.BatchRecord](rr.data)
	if err != nil {
		return rec, 0, false // read back from the store instead
	}
	return rec, rr.rev, true
}

// updateRecent applies change to the remembered record of batch id and
// writes it with compare-and-set on the remembered revision. ok is false
// when there is nothing remembered or the record changed meanwhile: the
// caller then applies change to the record as stored.
func (rs *recordStore) updateRecent(ctx context.Context, id uint64, change func(*records.BatchRecord) (bool, error)) (written *records.BatchRecord, ok bool, err error) {
	rec, rev, ok := rs.recent.take(id)
	if !ok {
		return nil, false, nil
	}
	write, err := change(&rec)
	if err != nil || !write {
		return nil, false, nil // decide on the record as stored
	}
	data, err := records.Encode(&rec)
	if err != nil {
		return nil, true, err
	}
	if err := rs.keyBeforeTerminal(ctx, &rec); err != nil {
		return nil, true, err
	}
	if ttl := rs.recordTTL(&rec); ttl > 0 {
		_, err = streams.PutKeyTTL(ctx, rs.js, streams.BucketBatches, streams.BatchKey(id), data, rev, ttl)
	} else {
		_, err = rs.batches.Update(ctx, streams.BatchKey(id), data, rev)
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, streams.ErrConflict) {
			return nil, false, nil
		}
		return nil, true, err
	}
	return &rec, true, nil
}

// idemKey is what an idempotency key of the batches bucket says: the id
// of its batch, and whether the key was taken before that batch's record
// was written (taken), so that the record may be missing because the
// submission was refused or cut short. A key written again once its
// batch finished (expireKeys), or by an earlier version after the record,
// is not taken: its batch was recorded.
type idemKey struct {
	id    uint64
	taken bool
	// rev is the key's revision as read.
	rev uint64
}

// idemTakenSuffix marks the value of a key taken before its batch's
// record: "<id> taken". A reader that only scans the number (fmt.Sscan)
// reads the id either way.
const idemTakenSuffix = " taken"

// idempotencyValue is the value of an idempotency key naming batch id.
func idempotencyValue(id uint64, taken bool) []byte {
	v := strconv.AppendUint(nil, id, 10)
	if taken {
		v = append(v, idemTakenSuffix...)
	}
	return v
}

// idempotent reads the batch user's idempotency key idem names; ok is
// false when it names none.
func (rs *recordStore) idempotent(ctx context.Context, user, idem string) (idemKey, bool, error) {
	e, err := rs.batches.Get(ctx, streams.IdempotencyKey(user, idem))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return idemKey{}, false, nil
	}
	if err != nil {
		return idemKey{}, false, err
	}
	v := string(e.Value())
	num, taken := strings.CutSuffix(v, idemTakenSuffix)
	id, err := strconv.ParseUint(num, 10, 64)
	if err != nil || id == 0 {
		return idemKey{}, false, fmt.Errorf("authz: idempotency record %q: expected a batch id", logging.Capped(v))
	}
	return idemKey{id: id, taken: taken, rev: e.Revision()}, true, nil
}

// recordedUnder is the id of the batch recorded under user's idempotency
// key idem; ok is false when the key names none, or names one whose
// record was never written.
func (rs *recordStore) recordedUnder(ctx context.Context, user, idem string) (uint64, bool, error) {
	k, ok, err := rs.idempotent(ctx, user, idem)
	if err != nil || !ok || !k.taken {
		return k.id, ok, err
	}
	if _, err := rs.record(ctx, k.id); err != nil {
		if ae := (*Error)(nil); errors.As(err, &ae) && ae.Code == api.CodeNotFound {
			return 0, false, nil
		}
		return 0, false, err
	}
	return k.id, true, nil
}

// record reads batch id's record: a 404 when it has none.
func (rs *recordStore) record(ctx context.Context, id uint64) (*records.BatchRecord, error) {
	e, err := rs.batches.Get(ctx, streams.BatchKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errf(api.CodeNotFound, "authz: no batch %d", id)
	}
	if err != nil {
		return nil, err
	}
	rec, err := records.Decode[records.BatchRecord](e.Value())
	if err != nil {
		return nil, err
	}
	return &rec, nil
}

// recordFor reads batch id's record for a caller that may know of it only
// when may says so: a batch that does not exist and one the caller may
// not know of both answer hidden, so the answer tells nothing of which
// batches exist.
func (rs *recordStore) recordFor(ctx context.Context, id uint64, hidden *Error, may func(*pipeline.Batch) bool) (*records.BatchRecord, error) {
	rec, err := rs.record(ctx, id)
	var ae *Error
	if errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return nil, hidden
	}
	if err != nil {
		return nil, err
	}
	if !may(&rec.Batch) {
		return nil, hidden
	}
	return rec, nil
}

// batch answers the record of one batch, to its submitter and the owner.
func (rs *recordStore) batch(ctx context.Context, user string, req *api.IDRequest) (any, error) {
	rec, err := rs.record(ctx, req.ID)
	if ae := (*Error)(nil); errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return nil, rs.notFound(ctx, req.ID)
	}
	if err != nil {
		return nil, err
	}
	if user != rs.owner && user != rec.Batch.Submitter {
		// Do not tell others whether the batch exists.
		return nil, errf(api.CodeNotFound, "authz: no batch %d", req.ID)
	}
	rep := &api.BatchReply{Record: apiRecord(rec), Outputs: rec.Outputs}
	if st, err := rs.progress.Load(ctx, rec.Batch.Domain, rec.Batch.ID); err == nil && st.Rev != 0 {
		rep.Progress = apiProgress(&st.Progress)
		if !rec.Status.Terminal() || (len(rec.Outputs) == 0 && rec.Outcome != nil && rec.Outcome.Executed > 0) {
			// Running; or finished by a callback that carried no
			// outputs (of an older processor): the progress has them.
			rep.Outputs = st.Outputs
		}
	}
	if rep.Outputs == nil {
		rep.Outputs = []pipeline.Output{}
	}
	rep.Scheduled = rep.Progress == nil && rec.Status == pipeline.InProcess && rec.Batch.Scheduled(rs.now())
	return rep, nil
}
