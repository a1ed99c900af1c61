package authz

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/streams"
)

// A finished batch's records expire on their own (streams.Retention): the
// terminal write of its record carries what is left of its age as a
// per-message TTL, and so does every later write of it (a replay's link);
// its idempotency key and its submitter index key are written again with
// a TTL once it finished, before its callback is acknowledged.

// readRetention reads the retention provisioned on the batches and
// progress buckets.
func (s *Service) readRetention(ctx context.Context) error {
	r, err := streams.ReadRetention(ctx, s.batches)
	if err != nil {
		return fmt.Errorf("authz: %w", err)
	}
	s.retention = r
	pr, err := streams.ReadRetention(ctx, s.progress)
	if err != nil {
		return fmt.Errorf("authz: %w", err)
	}
	s.progressStore.Expire(s.js, pr)
	ids, err := s.js.Stream(ctx, streams.StreamIDs)
	if err != nil {
		return bindError("stream "+streams.StreamIDs, err)
	}
	s.idsWindow = ids.CachedInfo().Config.Duplicates
	return nil
}

// recordTTL is the time to live of rec written now: none while it runs;
// once finished, what is left of its age.
func (s *Service) recordTTL(rec *streams.BatchRecord) time.Duration {
	if !rec.Status.Terminal() {
		return 0
	}
	return s.retention.TTL(rec.FinishedAt, s.opts.Now(), rec.DeadLetter != 0)
}

// indexSlack is how much longer than its batch's record an index key
// lives, so that the index key of a window is written again at most once
// per indexSlack for the batches finishing in it (expiryMarks).
const indexSlack = time.Second

// expiry is what a finished batch's keys need: the index key of its
// window, its idempotency key, and the time to live of its record.
type expiry struct {
	user string
	id   uint64
	idem string
	ttl  time.Duration
	// idemTTL is the idempotency key's: at least ttl, and at least until
	// the id log forgets the key (its duplicate window from the
	// submission), which would give a resend the same id again.
	idemTTL time.Duration
}

// expiryOf is the expiry of the keys of rec, terminal; nil when records
// do not expire.
func (s *Service) expiryOf(rec *streams.BatchRecord) *expiry {
	ttl := s.recordTTL(rec)
	if ttl == 0 {
		return nil
	}
	e := &expiry{user: rec.Batch.Submitter, id: rec.Batch.ID, idem: rec.IdempotencyKey, ttl: ttl, idemTTL: ttl}
	if w := s.idsWindow - s.opts.Now().Sub(rec.CreatedAt); w > e.idemTTL {
		e.idemTTL = w
	}
	return e
}

// expiryMarks remembers until when this replica made each index key live
// (the key's last write, as far as this replica knows), so that the
// batches finishing in one window write its key once per indexSlack, not
// once each. A submission writes the key without a TTL, which only makes
// it live longer; a mark that is wrong costs one more write.
type expiryMarks struct {
	mu    sync.Mutex
	until map[indexMark]time.Time
}

// need says whether the index key of window k must be written to live
// until at least until, and if so marks it written until until+indexSlack.
func (m *expiryMarks) need(k indexMark, until time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.until[k]; ok && !t.Before(until) {
		return false
	}
	if m.until == nil {
		m.until = map[indexMark]time.Time{}
	}
	if len(m.until) >= maxIndexMarks {
		for k, t := range m.until {
			if t.Before(until) {
				delete(m.until, k)
			}
		}
	}
	m.until[k] = until.Add(indexSlack)
	return true
}

// due says whether need would ask for a write, without marking it.
func (m *expiryMarks) due(k indexMark, until time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.until[k]
	return !ok || t.Before(until)
}

// forget drops the mark of k, after its write failed.
func (m *expiryMarks) forget(k indexMark) {
	m.mu.Lock()
	delete(m.until, k)
	m.mu.Unlock()
}

// writes says whether expireKeys has anything to write for e.
func (s *Service) writes(e *expiry) bool {
	return e != nil && (e.idem != "" || s.expiries.due(indexMark{user: e.user, window: streams.SubmitterWindowOf(e.id)}, s.opts.Now().Add(e.ttl)))
}

// expireKeys writes the index key of e's window (unless this replica made
// it live long enough already) and its idempotency key again, each with a
// time to live at least its record's, and waits for both.
func (s *Service) expireKeys(ctx context.Context, e *expiry) error {
	var pending []*streams.PendingAck
	defer func() {
		for _, p := range pending {
			if p != nil {
				p.Forget()
			}
		}
	}()
	k := indexMark{user: e.user, window: streams.SubmitterWindowOf(e.id)}
	if s.expiries.need(k, s.opts.Now().Add(e.ttl)) {
		m := &nats.Msg{Subject: indexSubject(e.user, e.id)}
		streams.SetTTL(m, e.ttl+indexSlack)
		p, err := s.acks.Publish(m)
		if err != nil {
			s.expiries.forget(k)
			return fmt.Errorf("authz: expire the index key of batch %d: %w", e.id, err)
		}
		pending = append(pending, p)
	}
	if e.idem != "" {
		m := &nats.Msg{Subject: "$KV." + streams.BucketBatches + "." + streams.IdempotencyKey(e.user, e.idem), Data: []byte(strconv.FormatUint(e.id, 10))}
		streams.SetTTL(m, e.idemTTL)
		p, err := s.acks.Publish(m)
		if err != nil {
			return fmt.Errorf("authz: expire the idempotency key of batch %d: %w", e.id, err)
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		pending[i] = nil
		if _, err := p.Wait(ctx); err != nil {
			s.expiries.forget(k)
			return fmt.Errorf("authz: expire the keys of batch %d: %w", e.id, err)
		}
	}
	return nil
}

// notFound is the answer about batch id, which has no record: one whose
// id the id log handed out may have finished and expired.
func (s *Service) notFound(ctx context.Context, id uint64) *Error {
	if s.retention.Enabled() {
		if top, err := s.idsTop(ctx); err == nil && id <= top {
			return errf(CodeNotFound, "authz: no batch %d: it does not exist, or it finished and its record expired (records are kept %s)", id, formatAge(s.retention.Finished))
		}
	}
	return errf(CodeNotFound, "authz: no batch %d", id)
}

// idsTop is the largest batch id the id log handed out so far: the last
// id of the block of its last sequence.
func (s *Service) idsTop(ctx context.Context) (uint64, error) {
	st, err := s.js.Stream(ctx, streams.StreamIDs)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.LastSeq*submit.IDsPerSequence + submit.IDsPerSequence - 1, nil
}

// formatAge writes d in days when it is whole days ("7d"), as time.Duration
// does otherwise.
func formatAge(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}
