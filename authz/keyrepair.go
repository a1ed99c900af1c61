package authz

import (
	"context"
	"errors"
	"time"

	"github.com/tickflow/tickflow/logging"
)

// A send whose batch was recorded but whose token could not be published
// (the queue's stream unavailable for a moment) must not leave the batch
// recorded and queued nowhere, holding its label's slot, nor its key stuck
// until the next authz start. The batch without a key, or the key whose
// head it became, is handed to the replica's repair loop, which gives it
// its first token with backoff until it takes, unless it ran or finished
// meanwhile (a cancel). The publish is deduplicated by the queue's
// duplicate window, so a token the failed publish stored after all is not
// doubled. A replica that stops first leaves a key to the next start's
// resumeKeys; a batch without a key has no such index, and stays recorded
// and unqueued, as one does whose authz died between its record and its
// token.

// keyRepairs bounds the keys waiting for repair in one replica; beyond it
// a key waits for the next start.
const keyRepairs = 1024

// Backoff of the repair loop: from keyRepairFirst doubling to keyRepairMax.
const (
	keyRepairFirst = 250 * time.Millisecond
	keyRepairMax   = 5 * time.Second
)

// keyRef names one key's order or, with no key, one batch.
type keyRef struct {
	domain, key string
	id          uint64 // the batch, when key is empty
}

// repairKey hands a key whose head may lack its token to the repair loop.
func (s *Service) repairKey(domain, key string) {
	select {
	case s.repairs <- keyRef{domain: domain, key: key}:
	default:
		s.log.Error("key left for the next start: too many keys wait for repair", "domain", domain, "key", logging.Capped(key))
	}
}

// repairBatch hands a batch without a key, recorded and perhaps without
// its token, to the repair loop.
func (s *Service) repairBatch(domain string, id uint64) {
	select {
	case s.repairs <- keyRef{domain: domain, id: id}:
	default:
		s.log.Error("batch left recorded and unqueued: too many wait for repair", "domain", domain, "batch_id", id)
	}
}

// repairKeys runs until ctx is done, giving each handed key's head, or
// batch, its token (ensureHead, ensureQueued), retrying one until it takes.
func (s *Service) repairKeys(ctx context.Context) {
	for {
		var k keyRef
		select {
		case <-ctx.Done():
			return
		case k = <-s.repairs:
		}
		for wait := keyRepairFirst; ; wait = min(2*wait, keyRepairMax) {
			if k.key == "" {
				err := s.ensureQueued(ctx, k.domain, k.id)
				if err == nil {
					s.log.Info("batch queued after its send failed", "domain", k.domain, "batch_id", k.id)
					break
				}
				s.log.Warn("batch not queued yet", "domain", k.domain, "batch_id", k.id, "retry_in", wait, "err", err)
			} else {
				err := s.repairHead(ctx, k)
				if err == nil {
					s.log.Info("key head repaired", "domain", k.domain, "key", logging.Capped(k.key))
					break
				}
				s.log.Warn("key head not repaired yet", "domain", k.domain, "key", logging.Capped(k.key), "retry_in", wait, "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
	}
}

// repairHead gives k's current head its token if it never ran.
func (s *Service) repairHead(ctx context.Context, k keyRef) error {
	q, err := s.keyOrder.Load(ctx, k.domain, k.key)
	if err != nil {
		return err
	}
	if q.Head() == 0 {
		return nil
	}
	return s.ensureHead(ctx, k.domain, k.key, q.Head())
}

// ensureQueued gives batch id, without a key, its first token if it is
// recorded, not finished, and never ran (startIfNeverRan).
func (s *Service) ensureQueued(ctx context.Context, domain string, id uint64) error {
	rec, err := s.record(ctx, id)
	var ae *Error
	switch {
	case errors.As(err, &ae) && ae.Code == CodeNotFound:
		s.log.Error("a batch to queue has no record: nothing to queue", "domain", domain, "batch_id", id)
		return nil
	case err != nil:
		return err
	case rec.Status.Terminal():
		return nil
	}
	_, err = s.startIfNeverRan(ctx, &rec.Batch)
	return err
}
