package authz

import (
	"context"
	"errors"
	"fmt"

	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// Per-key order. Batches of a domain that carry the same key run one at a
// time, in the order authz accepted them. The keys bucket holds, per
// (domain, key), the ids of the batches waiting (streams.KeyQueue); only
// the first, the key's head, has a queue token. A batch joins its key's
// order when it is admitted (send, insert, replay) and gets its token only
// if it became the head. When a batch is terminal its callback reaches
// authz (the owner's evict publishes one too), and Apply takes it off its
// key's order and publishes the next head's token before the callback is
// acknowledged.
//
// Crash safety: releasing is idempotent. A release that finds its batch no
// longer listed (the callback redelivered after a crash between the
// compare-and-set and the publish) publishes the current head's first token
// again if the head never ran: deduplicated if it exists (a head that ran
// has a live token, which the processor keeps). A
// submission cut short after it made its batch the head is completed by
// its retry with the same idempotency key, and by every authz start
// (resumeKeys).

// maxRelease bounds the heads one release walks past: heads found finished
// (their release raced with this one) or without a record.
const maxRelease = 64

// admit queues a batch that was just recorded: an unkeyed batch gets its
// token, a keyed one joins its key's order and gets its token only as the
// key's head. headOrFree says the batch has a token now (always, unkeyed).
// repeat says the batch may have been admitted before (a retried
// submission, a resumed edit, a replay finished again): then a batch
// already finished is not listed again, and a head's live token is
// published rather than its first.
func (s *Service) admit(ctx context.Context, b *pipeline.Batch, repeat bool) (headOrFree bool, err error) {
	if b.Key == "" {
		return true, PublishToken(ctx, s.js, b, 0, 0)
	}
	if repeat {
		if done, err := s.finished(ctx, b.ID); err != nil || done {
			return false, err
		}
	}
	q, added, err := s.keyOrder.Append(ctx, b.Domain, b.Key, b.ID)
	if err != nil {
		return false, fmt.Errorf("authz: batch %d joins the order of its key: %w", b.ID, err)
	}
	if repeat && added {
		// It may have run and been released between the read above and
		// the append: then it must not stay listed.
		if done, err := s.finished(ctx, b.ID); err != nil {
			return false, err
		} else if done {
			return false, s.releaseKey(ctx, b.Domain, b.Key, b.ID)
		}
	}
	if q.Head() != b.ID {
		return false, nil
	}
	if repeat {
		err = s.ensureHead(ctx, b.Domain, b.Key, q.Head())
	} else {
		err = PublishToken(ctx, s.js, b, 0, 0)
	}
	if err != nil {
		// The batch is its key's head without a token: the repair loop
		// gives it one, so the key does not wait for the next start.
		s.repairKey(b.Domain, b.Key)
	}
	return true, err
}

// finished says whether batch id's record is terminal.
func (s *Service) finished(ctx context.Context, id uint64) (bool, error) {
	rec, err := s.record(ctx, id)
	if err != nil {
		return false, err
	}
	return rec.Status.Terminal(), nil
}

// releaseKey takes terminal batch id off its key's order and gives the
// next head its token. Idempotent: when id is no longer listed (a repeated
// callback), the current head's live token is published again.
func (s *Service) releaseKey(ctx context.Context, domain, key string, id uint64) error {
	q, at, err := s.keyOrder.Remove(ctx, domain, key, id)
	if err != nil {
		return fmt.Errorf("authz: release key %q of batch %d: %w", logging.Capped(key), id, err)
	}
	switch head := q.Head(); {
	case head == 0 || at > 0:
		// Nobody waits, or the head stays the head.
		return nil
	case at == 0:
		// A head that never ran: its first token.
		rec, err := s.record(ctx, head)
		if err != nil {
			return s.ensureHead(ctx, domain, key, head)
		}
		return PublishToken(ctx, s.js, &rec.Batch, 0, 0)
	default:
		return s.ensureHead(ctx, domain, key, head)
	}
}

// ensureHead makes sure key's head can run: a head that never ran gets its
// first token again (deduplicated within the window), a head that finished
// already (its release is due) or has no record is taken off, and a head
// that ran is left to the processor, which keeps its live token.
func (s *Service) ensureHead(ctx context.Context, domain, key string, head uint64) error {
	for range maxRelease {
		rec, err := s.record(ctx, head)
		var ae *Error
		switch {
		case errors.As(err, &ae) && ae.Code == CodeNotFound:
			s.log.Error("a key's head has no batch record: taken off", "batch_id", head, "domain", domain, "key", logging.Capped(key))
		case err != nil:
			return err
		case !rec.Status.Terminal():
			st, err := s.progressStore.Load(ctx, domain, head)
			if err != nil {
				return err
			}
			if st.Rev != 0 {
				// It ran: the processor keeps its live token (a stale one
				// brings it back), and a copy published past the duplicate
				// window would run beside it.
				return nil
			}
			return PublishToken(ctx, s.js, &rec.Batch, 0, 0)
		}
		q, at, err := s.keyOrder.Remove(ctx, domain, key, head)
		if err != nil {
			return fmt.Errorf("authz: release key %q of batch %d: %w", logging.Capped(key), head, err)
		}
		if q.Head() == 0 {
			return nil
		}
		if at == 0 {
			if rec, err := s.record(ctx, q.Head()); err == nil {
				return PublishToken(ctx, s.js, &rec.Batch, 0, 0)
			}
		}
		head = q.Head()
	}
	return fmt.Errorf("authz: key %q of %s: more than %d finished heads in a row", logging.Capped(key), domain, maxRelease)
}

// resumeKeys gives every key's head its token again: a submission or a
// release cut short by a crash may have left a head without one. A key it
// cannot repair is logged and left to the next start or release.
func (s *Service) resumeKeys(ctx context.Context) {
	qs, err := s.keyOrder.ListAll(ctx)
	if err != nil {
		s.log.Warn("key orders not checked", "err", err)
		return
	}
	for _, q := range qs {
		if err := s.ensureHead(ctx, q.Domain, q.Key, q.Head()); err != nil {
			s.log.Warn("key head not repaired", "domain", q.Domain, "key", logging.Capped(q.Key), "batch_id", q.Head(), "err", err)
		}
	}
}

// keyed is the key a finished batch held, if any, for Apply to release.
type keyed struct {
	domain, key string
}

func keyOf(b *pipeline.Batch) keyed { return keyed{domain: b.Domain, key: b.Key} }

// release releases the key, when there is one, of finished batch id.
func (k keyed) release(ctx context.Context, s *Service, id uint64) error {
	if k.key == "" {
		return nil
	}
	return s.releaseKey(ctx, k.domain, k.key, id)
}

// tokenKey is the key of the batch a token carries a copy of, if any.
func tokenKey(tok streams.Token) string {
	if tok.Batch == nil {
		return ""
	}
	return tok.Batch.Key
}
