package authz

import (
	"context"
	"time"

	"github.com/tickflow/tickflow/logging"
)

// A send whose batch became its key's head but whose token could not be
// published (the queue's stream unavailable for a moment) must not leave
// the key stuck until the next authz start: the key is handed to the
// replica's repair loop, which gives the key's head its token again with
// backoff until it takes. A replica that stops first leaves the key to the
// next start's resumeKeys.

// keyRepairs bounds the keys waiting for repair in one replica; beyond it
// a key waits for the next start.
const keyRepairs = 1024

// Backoff of the repair loop: from keyRepairFirst doubling to keyRepairMax.
const (
	keyRepairFirst = 250 * time.Millisecond
	keyRepairMax   = 5 * time.Second
)

// keyRef names one key's order.
type keyRef struct{ domain, key string }

// repairKey hands a key whose head may lack its token to the repair loop.
func (s *Service) repairKey(domain, key string) {
	select {
	case s.repairs <- keyRef{domain, key}:
	default:
		s.log.Error("key left for the next start: too many keys wait for repair", "domain", domain, "key", logging.Capped(key))
	}
}

// repairKeys runs until ctx is done, giving each handed key's head its
// token (ensureHead), retrying a key until it takes.
func (s *Service) repairKeys(ctx context.Context) {
	for {
		var k keyRef
		select {
		case <-ctx.Done():
			return
		case k = <-s.repairs:
		}
		for wait := keyRepairFirst; ; wait = min(2*wait, keyRepairMax) {
			err := s.repairHead(ctx, k)
			if err == nil {
				s.log.Info("key head repaired", "domain", k.domain, "key", logging.Capped(k.key))
				break
			}
			s.log.Warn("key head not repaired yet", "domain", k.domain, "key", logging.Capped(k.key), "retry_in", wait, "err", err)
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
