package authz

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/streams"
)

// handleCallback applies one callback to its batch record; the message is
// acknowledged only once the record says so, so callbacks published while
// authz was down are applied when it is back. A callback that cannot be
// applied is retried with increasing delays (retryCallback).
func (s *Service) handleCallback(ctx context.Context, m jetstream.Msg) {
	ctx, span := s.opts.Telemetry.StartApply(ctx, m.Headers())
	defer span.End()
	deliveries, published := 1, time.Time{}
	if md, err := m.Metadata(); err == nil {
		deliveries, published = int(md.NumDelivered), md.Timestamp
	}
	cb, err := streams.Decode[streams.Callback](m.Data())
	if err != nil {
		// Nothing in it is trusted, not even of a newer version: its
		// headers say which batch it is about.
		err, cb = unreadable("callback", cb.V, err), streams.Callback{}
	} else if d, ok := streams.CallbackDomain(m.Subject()); !ok || d != cb.Domain {
		// The subject is what nats.conf can grant per domain; a callback
		// that names another domain than its subject is not applied.
		s.log.Error("callback refused: its subject and its domain differ", "subject", logging.Capped(m.Subject()), "domain", logging.Capped(cb.Domain), "batch_id", cb.BatchID)
		_ = m.Ack()
		return
	} else {
		if cb.At.IsZero() {
			// A processor that finished a batch in its first step wrote no
			// progress record, hence no time: the callback's publication is
			// when the batch finished.
			cb.At = published
		}
		var recorded bool
		if recorded, err = s.apply(ctx, &cb); recorded && err == nil && s.Table().hasDomain(cb.Domain) {
			// Only then is the domain label one of a bounded set, not
			// whatever a callback named.
			s.opts.Telemetry.CallbackApplied(cb.Domain, published)
		}
	}
	if err != nil {
		s.retryCallback(ctx, m, &cb, deliveries, err)
		return
	}
	_ = m.Ack()
}

// Apply records a terminal callback on its batch. It is idempotent: a
// record already terminal is left as it is, so a repeated callback changes
// nothing. A batch record that cannot be read (malformed, or of a newer
// wire version) gives an error matching ErrUnreadable.
func (s *Service) Apply(ctx context.Context, cb *streams.Callback) error {
	_, err := s.apply(ctx, cb)
	return err
}

// apply is Apply; recorded says the batch has a record in the callback's
// domain (the callback applied now or before).
func (s *Service) apply(ctx context.Context, cb *streams.Callback) (recorded bool, err error) {
	at := cb.At
	if at.IsZero() {
		at = s.opts.Now()
	}
	o := cb.Outcome
	batchDomain, finishedLabel, key := "", "", keyed{}
	sender := false // the batch may hold a sender to release
	rec, err := s.updateRecord(ctx, cb.BatchID, func(rec *streams.BatchRecord) (bool, error) {
		batchDomain, finishedLabel, key = "", "", keyed{}
		recorded = rec.Batch.Domain == cb.Domain
		sender = rec.Batch.NeedsSender() && recorded
		if rec.Status.Terminal() {
			// Applied before: a repeated callback. Its slot release may be
			// what failed the first time, so it is done again.
			finishedLabel, key = rec.Batch.Label, keyOf(&rec.Batch)
			return false, nil
		}
		if rec.Batch.Domain != cb.Domain {
			batchDomain = rec.Batch.Domain
			return false, nil
		}
		rec.Status, rec.Outcome, rec.Attempts = o.Status, &o, cb.Attempts
		rec.Fallback, rec.DeadLetter = cb.Fallback, cb.DeadLetter
		rec.UpdatedAt = s.opts.Now().UTC()
		rec.History = append(rec.History, streams.Event{At: at.UTC(), What: "callback", Detail: fmt.Sprintf("%s from %s after %d attempts", o, cb.Processor, cb.Attempts)})
		return true, nil
	})
	if errors.Is(err, errUnrecorded) {
		s.log.Error("callback for an unrecorded batch ignored", "batch_id", cb.BatchID)
		return false, nil
	}
	recorded = recorded && err == nil
	if batchDomain != "" {
		s.log.Error("callback refused: the batch belongs to another domain", "batch_id", cb.BatchID, "domain", logging.Capped(cb.Domain), "batch_domain", batchDomain)
		return false, err
	}
	if err != nil {
		return false, err
	}
	if rec != nil {
		// The processor logs each finished batch at Info; this is its echo.
		s.log.Debug("batch finished", "batch_id", cb.BatchID, "outcome", o.String(), "domain", cb.Domain)
		s.opts.Telemetry.BatchFinished(ctx, &rec.Batch, o)
		finishedLabel, key = rec.Batch.Label, keyOf(&rec.Batch)
	}
	// The record is terminal: free the batch's concurrency slot. Until that
	// is done the callback is not acknowledged, so a release that failed
	// (or a crash right after the record's write) is tried again with the
	// redelivered callback, which finds the record terminal and comes here.
	if l, ok := s.Table().Labels[finishedLabel]; ok && l.MaxConcurrent > 0 {
		if err := s.release(ctx, finishedLabel, cb.BatchID); err != nil {
			return recorded, fmt.Errorf("authz: release the slot of batch %d: %w", cb.BatchID, err)
		}
	}
	if sender {
		if err := s.releaseSender(ctx, cb.Domain, cb.BatchID); err != nil {
			return recorded, err
		}
	}
	// Likewise its key: the next batch of the key gets its token.
	return recorded, key.release(ctx, s, cb.BatchID)
}
