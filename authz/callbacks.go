package authz

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/streams"
)

// handleCallback applies one callback to its batch record; the message is
// acknowledged only once the record says so, so callbacks published while
// authz was down are applied when it is back.
func (s *Service) handleCallback(ctx context.Context, m jetstream.Msg) {
	cb, err := streams.Decode[streams.Callback](m.Data())
	if err != nil {
		s.log.Error("undecodable callback dropped", "subject", m.Subject(), "err", err)
		_ = m.Term()
		return
	}
	if err := s.Apply(ctx, &cb); err != nil {
		s.log.Warn("callback not applied yet; redelivered shortly", "batch_id", cb.BatchID, "err", err)
		_ = m.Nak()
		return
	}
	_ = m.Ack()
}

// Apply records a terminal callback on its batch. It is idempotent: a
// record already terminal is left as it is, so a repeated callback changes
// nothing.
func (s *Service) Apply(ctx context.Context, cb *streams.Callback) error {
	for range 20 {
		e, err := s.batches.Get(ctx, streams.BatchKey(cb.BatchID))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			s.log.Error("callback for an unrecorded batch ignored", "batch_id", cb.BatchID)
			return nil
		}
		if err != nil {
			return err
		}
		rec, err := streams.Decode[streams.BatchRecord](e.Value())
		if err != nil {
			return err
		}
		if rec.Status.Terminal() {
			return nil
		}
		o := cb.Outcome
		rec.Status, rec.Outcome, rec.Attempts = o.Status, &o, cb.Attempts
		rec.Fallback, rec.DeadLetter = cb.Fallback, cb.DeadLetter
		rec.UpdatedAt = s.opts.Now().UTC()
		rec.History = append(rec.History, streams.Event{At: cb.At, What: "callback", Detail: fmt.Sprintf("%s from %s after %d attempts", o, cb.Processor, cb.Attempts)})
		data, err := streams.Encode(&rec)
		if err != nil {
			return err
		}
		if _, err := s.batches.Update(ctx, streams.BatchKey(cb.BatchID), data, e.Revision()); errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		} else if err != nil {
			return err
		}
		s.log.Info("batch finished", "batch_id", cb.BatchID, "outcome", o.String(), "domain", cb.Domain)
		if l, ok := s.Table().Labels[rec.Batch.Label]; ok && l.MaxConcurrent > 0 {
			if err := s.release(ctx, rec.Batch.Label, cb.BatchID); err != nil {
				s.log.Warn("slot not released; reclaimed later", "batch_id", cb.BatchID, "err", err)
			}
		}
		return nil
	}
	return fmt.Errorf("authz: record of batch %d kept changing", cb.BatchID)
}
