package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// Per-key order. Batches of a domain that carry the same key run one at a
// time, in the order authz accepted them. The keys bucket holds, per
// (domain, key), the ids of the batches waiting (records.KeyQueue); only
// the first, the key's head, has a queue token. A batch joins its key's
// order when it is admitted (send, insert, replay) and gets its token only
// if it became the head. When a batch is terminal its callback reaches
// authz (the owner's evict publishes one too), and Apply takes it off its
// key's order and publishes the next head's token before the callback is
// acknowledged. Joining is one compare-and-set of the key's entry, which
// the key order's store makes wait its turn and retries until it lands
// (keyorder.Store); it also enforces each submitter's bound on the
// key (Label.KeyBound). A join that fails all the same is handed to the
// repair loop (keyrepair.go).
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

// keyOrders keeps each key's waiting batches in order, one running at a
// time: it admits a keyed batch, releases its key once it finished and
// starts the next, and answers the owner's keys listing (keystate.go).
type keyOrders struct {
	js        jetstream.JetStream
	order     *keyorder.Store
	senders   jetstream.KeyValue
	progress  *streams.ProgressStore
	store     *recordStore
	scheduled *scheduledBatches
	removal   *remover
	// repair takes the keys and batches left half done (keyrepair.go).
	repair *keyRepairer
	now    func() time.Time
	log    *slog.Logger
}

// admit queues a batch that was just recorded: an unkeyed batch gets its
// token, a keyed one joins its key's order and gets its token only as the
// key's head. headOrFree says the batch is free to run, unkeyed or its
// key's head: with a nil error it has its token now; with an error, its
// token may be missing (the publish failed, or, for a repeat, a read
// before it), and a keyed one's key is handed to the repair loop. repeat
// says the batch may have been admitted before (a retried submission, a
// resumed edit, a replay finished again): then a batch already finished is
// not listed again, a head's live token is published rather than its
// first, and a batch that ran, or was removed, gets no first token again
// (startIfNeverRan): a retry of a cancelled submission must not run it.
//
// bound, when positive, refuses a batch whose submitter has bound batches
// in its key's order already (Label.KeyBound): the batch, recorded, is
// finished as removed and the error is a 429 (refuseOverBound). A join
// that fails otherwise, or whose outcome is unknown, hands the batch to the
// repair loop, which joins it (errJoinLater).
func (ko *keyOrders) admit(ctx context.Context, b *pipeline.Batch, repeat bool, bound int) (headOrFree bool, err error) {
	if b.Key == "" {
		if repeat {
			_, err := ko.startIfNeverRan(ctx, b)
			return true, err
		}
		return true, ko.scheduled.publishFirst(ctx, b, true)
	}
	if repeat {
		if done, err := ko.finished(ctx, b.ID); err != nil || done {
			return false, err
		}
	}
	q, added, err := ko.order.AppendBy(ctx, b.Domain, b.Key, b.ID, b.Submitter, bound)
	if errors.Is(err, keyorder.ErrBound) {
		return false, ko.refuseOverBound(ctx, b, bound, q.CountBy(b.Submitter))
	}
	if err != nil {
		err = fmt.Errorf("authz: batch %d joins the order of its key: %w", b.ID, err)
		if !ko.repair.repairJoin(b.Domain, b.Key, b.ID) {
			return false, fmt.Errorf("%w; %w", err, errNotHanded)
		}
		return false, fmt.Errorf("%w; %w", err, errJoinLater)
	}
	if repeat && added {
		// It may have run and been released between the read above and
		// the append: then it must not stay listed.
		if done, err := ko.finished(ctx, b.ID); err != nil {
			return false, err
		} else if done {
			return false, ko.releaseKey(ctx, b.Domain, b.Key, b.ID)
		}
	}
	if q.Head() != b.ID {
		return false, nil
	}
	if repeat {
		err = ko.ensureHead(ctx, b.Domain, b.Key, q.Head())
	} else {
		err = ko.scheduled.publishFirst(ctx, b, true)
	}
	if err != nil {
		// The batch is its key's head without a token: the repair loop
		// gives it one, so the key does not wait for the next start.
		if !ko.repair.repairKey(b.Domain, b.Key) {
			err = fmt.Errorf("%w; %w", err, errNotHanded)
		}
	}
	return true, err
}

// DefaultMaxPerKey is Label.KeyBound when the label sets no max_per_key.
const DefaultMaxPerKey = 10

// KeyBound bounds the batches one submitter may have unfinished on one key
// under the label: waiting in the key's order or running as its head. A
// key is shared by every submitter of its domain, and without a bound one
// of them could queue enough batches on it to hold every other's back for
// hours. The owner's insert and replay are not bounded.
func (l *Label) KeyBound() int {
	if l.MaxPerKey > 0 {
		return l.MaxPerKey
	}
	return DefaultMaxPerKey
}

// checkKeyBound refuses, with a 429 naming the bound, a submission of user
// on key under label when user's batches in the key's order reach the
// label's bound already. It runs before anything is recorded; the join
// checks the bound again in its compare-and-set (admit), for submissions
// racing past this read.
func (ko *keyOrders) checkKeyBound(ctx context.Context, label string, l *Label, user, domain, key string) error {
	q, err := ko.order.Load(ctx, domain, key)
	if err != nil {
		return err
	}
	if n := q.CountBy(user); n >= l.KeyBound() {
		return overBound(label, l, user, key, n)
	}
	return nil
}

func overBound(label string, l *Label, user, key string, n int) *Error {
	return errf(api.CodeTooManyRequests, "authz: %q has %d unfinished batches on key %q, the bound of label %q (max_per_key %d): wait for one to finish", user, n, logging.Capped(key), logging.Capped(label), l.KeyBound())
}

// refuseOverBound finishes batch b, recorded but refused a place in its
// key's order for its submitter's n batches there (bound), as removed: it
// then holds no slot of its label and is never queued. The answer is a 429
// naming the bound, or, when the removal fails, an error that says the
// batch is recorded.
func (ko *keyOrders) refuseOverBound(ctx context.Context, b *pipeline.Batch, bound, n int) error {
	reason := fmt.Sprintf("refused: its submitter had %d unfinished batches on its key, the bound", n)
	st, err := ko.progress.Load(ctx, b.Domain, b.ID)
	if err == nil && !removed(st) {
		err = ko.removal.markRemoved(ctx, b, st, reason)
	}
	if err == nil {
		_, err = ko.removal.retireRemoved(ctx, b, st, nil)
	}
	if err != nil {
		return fmt.Errorf("authz: batch %d is over the bound of its key (%d of its submitter's batches) and recorded, but could not be removed (%w): cancel it", b.ID, bound, err)
	}
	return errf(api.CodeTooManyRequests, "authz: %q has %d unfinished batches on key %q, the bound of label %q (max_per_key %d): batch %d is not queued, and is recorded as removed", b.Submitter, n, logging.Capped(b.Key), logging.Capped(b.Label), bound, b.ID)
}

// finished says whether batch id's record is terminal.
func (ko *keyOrders) finished(ctx context.Context, id uint64) (bool, error) {
	rec, err := ko.store.record(ctx, id)
	if err != nil {
		return false, err
	}
	return rec.Status.Terminal(), nil
}

// releaseKey takes terminal batch id off its key's order and gives the
// next head its token (ensureHead). Idempotent: when id is no longer listed
// (a repeated callback), the current head is ensured again.
func (ko *keyOrders) releaseKey(ctx context.Context, domain, key string, id uint64) error {
	q, at, err := ko.order.Remove(ctx, domain, key, id)
	if err != nil {
		return fmt.Errorf("authz: release key %q of batch %d: %w", logging.Capped(key), id, err)
	}
	if head := q.Head(); head != 0 && at <= 0 {
		// The head changed, or the release is repeated.
		return ko.ensureHead(ctx, domain, key, head)
	}
	// Nobody waits, or the head stays the head.
	return nil
}

// ensureHead makes sure key's head can run: a head that never ran gets its
// first token (deduplicated within the window), and a head that ran is
// left to the processor, which keeps its live token. A head that is
// terminal is taken off, and the next one ensured in turn: one whose
// record says so (its release is due), one without a record, and one whose
// progress is Done, such as a batch cancelled while it waited behind the
// previous head (its first token would run it: a first step reads no
// progress).
func (ko *keyOrders) ensureHead(ctx context.Context, domain, key string, head uint64) error {
	for range maxRelease {
		rec, err := ko.store.record(ctx, head)
		var ae *Error
		switch {
		case errors.As(err, &ae) && ae.Code == api.CodeNotFound:
			ko.log.Error("a key's head has no batch record: taken off", "batch_id", head, "domain", domain, "key", logging.Capped(key))
		case err != nil:
			return err
		case !rec.Status.Terminal():
			done, err := ko.startIfNeverRan(ctx, &rec.Batch)
			if err != nil {
				return err
			}
			if !done {
				return nil
			}
		}
		q, _, err := ko.order.Remove(ctx, domain, key, head)
		if err != nil {
			return fmt.Errorf("authz: release key %q of batch %d: %w", logging.Capped(key), head, err)
		}
		if q.Head() == 0 {
			return nil
		}
		head = q.Head()
	}
	return fmt.Errorf("authz: key %q of %s: more than %d finished heads in a row", logging.Capped(key), domain, maxRelease)
}

// startIfNeverRan gives batch b, recorded and not finished, its first
// token if it never ran. done says it finished: its progress is Done (a
// removal, finished here if it was cut short).
func (ko *keyOrders) startIfNeverRan(ctx context.Context, b *pipeline.Batch) (done bool, err error) {
	st, err := ko.progress.Load(ctx, b.Domain, b.ID)
	if err != nil {
		return false, err
	}
	switch {
	case st.State == records.Done:
		return true, ko.doneHead(ctx, b, st)
	case st.Rev != 0:
		// It ran: the processor keeps its live token (a stale one brings
		// it back), and a copy published past the duplicate window would
		// run beside it.
		return false, nil
	default:
		return ko.startHead(ctx, b, false)
	}
}

// startHead gives head b, which never ran, its first token: its schedule
// while it waits for its RunAt (publishFirst), unless due says the
// schedule fired. done says b finished meanwhile: a cancel may have
// written its progress after the read that found it queued, and read the
// queue before the token was there; the progress read after the publish
// sees it, and the removal is finished here, token included.
func (ko *keyOrders) startHead(ctx context.Context, b *pipeline.Batch, due bool) (done bool, err error) {
	if due {
		err = submit.PublishFirstAgain(ctx, ko.js, b)
	} else {
		err = ko.scheduled.publishFirst(ctx, b, false)
	}
	if err != nil {
		return false, err
	}
	st, err := ko.progress.Load(ctx, b.Domain, b.ID)
	if err != nil || st.State != records.Done {
		return false, err
	}
	return true, ko.doneHead(ctx, b, st)
}

// doneHead is ensureHead's for a head whose progress is Done while its
// record is not terminal yet: its callback is on its way, or, for a batch
// removed by authz, perhaps never published (a removal cut short), and
// then the removal is finished here (see Removal).
func (ko *keyOrders) doneHead(ctx context.Context, b *pipeline.Batch, st *streams.ProgressEntry) error {
	if !removed(st) {
		return nil
	}
	seqs, err := ko.removal.tokensOf(ctx, b)
	if err != nil {
		return err
	}
	_, err = ko.removal.retireRemoved(ctx, b, st, seqs)
	return err
}

// resumeKeys gives every key's head its token again: a submission or a
// release cut short by a crash may have left a head without one. A key it
// cannot repair now (its queue's stream unavailable) is handed to the
// repair loop.
func (ko *keyOrders) resumeKeys(ctx context.Context) {
	qs, err := ko.order.ListAll(ctx)
	if err != nil {
		ko.log.Warn("key orders not checked", "err", err)
		return
	}
	for _, q := range qs {
		if err := ko.ensureHead(ctx, q.Domain, q.Key, q.Head()); err != nil {
			ko.log.Warn("key head not repaired at start: handed to the repair loop", "domain", q.Domain, "key", logging.Capped(q.Key), "batch_id", q.Head(), "err", err)
			ko.repair.repairKey(q.Domain, q.Key)
		}
	}
}

// keyed is the key a finished batch held, if any, for Apply to release.
type keyed struct {
	domain, key string
}

func keyOf(b *pipeline.Batch) keyed { return keyed{domain: b.Domain, key: b.Key} }

// release releases the key, when there is one, of finished batch id.
func (k keyed) release(ctx context.Context, ko *keyOrders, id uint64) error {
	if k.key == "" {
		return nil
	}
	return ko.releaseKey(ctx, k.domain, k.key, id)
}

// tokenKey is the key of the batch a token carries a copy of, if any.
func tokenKey(tok records.Token) string {
	if tok.Batch == nil {
		return ""
	}
	return tok.Batch.Key
}
