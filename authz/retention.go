package authz

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
)

// A finished batch's records expire on their own (streams.Retention): the
// terminal write of its record carries what is left of its age as a
// per-message TTL, and so does every later write of it (a replay's link);
// its idempotency key is written again with a TTL once it finished, before
// its callback is acknowledged; its submitter index entry expires with the
// index's stream.

// readRetention reads the retention provisioned on the batches and
// progress buckets, and has progress (stored by ps) expire as provisioned.
func (rs *recordStore) readRetention(ctx context.Context, progress jetstream.KeyValue, ps *streams.ProgressStore) error {
	r, err := streams.ReadRetention(ctx, rs.batches)
	if err != nil {
		return fmt.Errorf("authz: %w", err)
	}
	rs.retention = r
	pr, err := streams.ReadRetention(ctx, progress)
	if err != nil {
		return fmt.Errorf("authz: %w", err)
	}
	ps.Expire(rs.js, pr)
	ids, err := rs.js.Stream(ctx, streams.StreamIDs)
	if err != nil {
		return bindError("stream "+streams.StreamIDs, err)
	}
	rs.idsWindow = ids.CachedInfo().Config.Duplicates
	return nil
}

// recordTTL is the time to live of rec written now: none while it runs;
// once finished, what is left of its age.
func (rs *recordStore) recordTTL(rec *records.BatchRecord) time.Duration {
	if !rec.Status.Terminal() {
		return 0
	}
	return rs.retention.TTL(rec.FinishedAt, rs.now(), rec.DeadLetter != 0)
}

// expiry is what a finished batch's keys need: its idempotency key, and
// the time to live of its record. (Its submitter index entry expires with
// the index's stream, streams.Settings.SubmittedMaxAge.)
type expiry struct {
	user string
	id   uint64
	idem string
	ttl  time.Duration
	// idemTTL is the idempotency key's: at least ttl, and at least the
	// duplicate window from the submission, so that a resend that soon is
	// told the batch finished rather than run again.
	idemTTL time.Duration
}

// expiryOf is the expiry of the keys of rec, terminal; nil when records
// do not expire.
func (rs *recordStore) expiryOf(rec *records.BatchRecord) *expiry {
	ttl := rs.recordTTL(rec)
	if ttl == 0 {
		return nil
	}
	e := &expiry{user: rec.Batch.Submitter, id: rec.Batch.ID, idem: rec.IdempotencyKey, ttl: ttl, idemTTL: ttl}
	if w := rs.idsWindow - rs.now().Sub(rec.CreatedAt); w > e.idemTTL {
		e.idemTTL = w
	}
	return e
}

// writes says whether expireKeys has anything to write for e.
func (rs *recordStore) writes(e *expiry) bool {
	return e != nil && e.idem != ""
}

// keyMsg is the rewrite of e's idempotency key: plain (no longer taken:
// its batch was recorded) and with its time to live.
func (rs *recordStore) keyMsg(e *expiry) *nats.Msg {
	return streams.KeyTTLMsg(streams.BucketBatches, streams.IdempotencyKey(e.user, e.idem), idempotencyValue(e.id, false), e.idemTTL)
}

// keyBeforeTerminal rewrites the idempotency key of rec, about to be
// written terminal, before that write: once the terminal record can
// expire, its key must no longer say taken, or a resend after the record
// expired would record the batch again. (expireKeys writes it again after
// the record, as the callback's release.)
func (rs *recordStore) keyBeforeTerminal(ctx context.Context, rec *records.BatchRecord) error {
	if !rec.Status.Terminal() || rec.IdempotencyKey == "" {
		return nil
	}
	return rs.expireKeys(ctx, rs.expiryOf(rec))
}

// expireKeys writes e's idempotency key again with a time to live at least
// its record's, and waits for it.
func (rs *recordStore) expireKeys(ctx context.Context, e *expiry) error {
	if e.idem == "" {
		return nil
	}
	p, err := rs.acks.Publish(rs.keyMsg(e))
	if err != nil {
		return fmt.Errorf("authz: expire the idempotency key of batch %d: %w", e.id, err)
	}
	if _, err := p.Wait(ctx); err != nil {
		return fmt.Errorf("authz: expire the idempotency key of batch %d: %w", e.id, err)
	}
	return nil
}

// notFound is the answer about batch id, which has no record: one whose
// id the id log handed out may have finished and expired.
func (rs *recordStore) notFound(ctx context.Context, id uint64) *Error {
	if rs.retention.Enabled() {
		if top, err := rs.idsTop(ctx); err == nil && id <= top {
			return errf(api.CodeNotFound, "authz: no batch %d: it does not exist, or it finished and its record expired (records are kept %s)", id, formatAge(rs.retention.Finished))
		}
	}
	return errf(api.CodeNotFound, "authz: no batch %d", id)
}

// idsTop is the largest batch id the id log handed out so far: the last
// id of the block of its last sequence.
func (rs *recordStore) idsTop(ctx context.Context) (uint64, error) {
	st, err := rs.js.Stream(ctx, streams.StreamIDs)
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
