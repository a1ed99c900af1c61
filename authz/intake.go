package authz

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// intake takes a submission onto the queues: it checks the caller and its
// label, limits, records, indexes and queues the batch (the send path, which
// the owner's insert and the scheduler use too).
type intake struct {
	js         jetstream.JetStream
	batches    jetstream.KeyValue
	acks       *jsapi.AckPublisher
	ids        *submit.IDs
	store      *recordStore
	slots      *slotKeeper
	submitters *submitterIndex
	keys       *keyOrders
	repair     *keyRepairer
	// rates are the senders' send rates, by caller.
	rates rateLimits
	table func() *Table
	now   func() time.Time
	log   *slog.Logger
	tel   *telemetry.Telemetry
}

// submission is what one submission asks for, once its caller is known to
// be allowed: send builds one from its request, and every other way of
// submitting a batch through the send path builds its own.
type submission struct {
	// label names l, the label the batch runs under.
	label string
	l     *Label
	// user is the submitter.
	user  string
	calls []api.CallSpec
	// key is the batch's serialisation key; idem its idempotency key.
	key, idem string
	prio      pipeline.Priority
	// force skips the label's concurrency limits and key bound (the
	// owner's insert).
	force bool
	// runAt, when set, schedules the batch: already checked against the
	// label's max_delay, and in the future when it was read.
	runAt time.Time
}

type built struct {
	batch    *pipeline.Batch
	dup      bool
	terminal bool // a duplicate whose batch already finished
}

func (ik *intake) send(ctx context.Context, user string, req *api.SendRequest) (*api.SendReply, error) {
	t := ik.table()
	if err := ik.takeSends(t, user, 1); err != nil {
		return nil, err
	}
	return ik.sendUnder(ctx, t, user, req)
}

// takeSends takes n sends from user's send rate under t, all or none: more
// than the burst is a 400 (it never could pass), more than the bucket
// holds now a 429, and neither takes any.
func (ik *intake) takeSends(t *Table, user string, n int) error {
	lim := t.limits(user, 0)
	if lim.sendRate > 0 && n > lim.sendBurst {
		return errf(api.CodeBadRequest, "authz: batches: %d, more than %s's send_burst (%d) allows at once; send at most %d a request", n, user, lim.sendBurst, lim.sendBurst)
	}
	if ik.rates.allowN(user, lim, ik.now(), n) {
		return nil
	}
	over := fmt.Sprintf("authz: %s sends more than %v per second (send_rate %v, send_burst %d)", user, lim.sendRate, lim.sendRate, lim.sendBurst)
	if n == 1 {
		return errf(api.CodeTooManyRequests, "%s; try again", over)
	}
	return errf(api.CodeTooManyRequests, "%s: %d batches at once is over it now; nothing was submitted, try again", over, n)
}

// sendUnder submits req under table t, its send already counted against
// the caller's rate.
func (ik *intake) sendUnder(ctx context.Context, t *Table, user string, req *api.SendRequest) (*api.SendReply, error) {
	sub, err := ik.check(t, user, req)
	if err != nil {
		return nil, err
	}
	return ik.submit(ctx, sub)
}

// check reads req as a submission of user's under table t: what it asks
// for must be allowed, its label known and its schedule within bounds.
func (ik *intake) check(t *Table, user string, req *api.SendRequest) (*submission, error) {
	if strings.HasPrefix(req.IdempotencyKey, streams.ScheduleIdempotencyPrefix) {
		return nil, errf(api.CodeBadRequest, "authz: idempotency_key: keys starting with %q are the schedules' own; choose another", streams.ScheduleIdempotencyPrefix)
	}
	l, ok := t.Labels[req.Label]
	if !ok {
		return nil, errf(api.CodeNotFound, "authz: unknown label %q", logging.Capped(req.Label))
	}
	if !l.Allows(user) {
		return nil, errf(api.CodeForbidden, "authz: %q may not submit under label %q", user, req.Label)
	}
	if err := t.allowedTypes(l.Domain, req.Functions); err != nil {
		return nil, err
	}
	runAt, err := l.runAt(req.Label, req.RunAt, req.Delay, ik.now())
	if err != nil {
		return nil, err
	}
	return &submission{label: req.Label, l: l, user: user, calls: req.Functions, key: req.Key,
		idem: req.IdempotencyKey, prio: l.Priority, runAt: runAt}, nil
}

// submit builds, limits, records and queues a batch.
func (ik *intake) submit(ctx context.Context, sub *submission) (*api.SendReply, error) {
	l := sub.l
	b, err := ik.build(ctx, sub)
	if err != nil {
		return nil, err
	}
	switch {
	case fresh(sub, b):
		if err := ik.queueNew(ctx, b.batch); err != nil {
			return nil, ik.unqueued(b.batch, err)
		}
	// A repeated submission publishes the (deduplicated) first token again
	// only while the batch never ran (admit's repeat): the first may have
	// been cut short by a crash.
	case !b.dup || !b.terminal:
		bound := 0
		if !b.dup {
			bound = l.KeyBound()
		}
		if head, err := ik.keys.admit(ctx, b.batch, b.dup, bound); err != nil {
			if errors.Is(err, errJoinLater) {
				return nil, fmt.Errorf("authz: batch %d is recorded, but has not joined the order of its key yet (%w); authz adds it as soon as it can: send it again only with the same idempotency key", b.batch.ID, err)
			}
			if !head {
				return nil, err
			}
			return nil, ik.unqueued(b.batch, err)
		}
	}
	return &api.SendReply{ID: b.batch.ID, Domain: b.batch.Domain, Priority: b.batch.Priority, Duplicate: b.dup, RunAt: b.batch.RunAt}, nil
}

// fresh says the batch sub recorded is new, with no idempotency key (no
// repeat), no key (no key's order) and no run_at (no schedule): only the
// repair loop and an authz start may publish its first token again. It
// goes without a deduplication id (queueNew); an authz start queues such a
// batch again only if it finds it neither queued nor run, and a token
// published again is marked to read the progress (submit.PublishFirstAgain).
func fresh(sub *submission, b *built) bool {
	return !b.dup && sub.idem == "" && b.batch.Key == "" && b.batch.RunAt.IsZero()
}

// queueNew publishes the first token of a fresh batch b, without a
// deduplication id, and waits until it is stored.
func (ik *intake) queueNew(ctx context.Context, b *pipeline.Batch) error {
	t, err := submit.StartNewToken(ctx, ik.acks, b, ik.now())
	if err != nil {
		return err
	}
	return t.Wait(ctx, ik.js)
}

// unqueued hands batch b, recorded and first in its key's order if it has
// one, but whose token could not be published (err), to the repair loop,
// which publishes it (admit handed a key's already), and says so.
func (ik *intake) unqueued(b *pipeline.Batch, err error) error {
	handed := !errors.Is(err, errNotHanded)
	if b.Key == "" {
		handed = ik.repair.repairBatch(b.Domain, b.ID)
	}
	if !handed {
		return fmt.Errorf("authz: batch %d is recorded, but its token could not be published (%w), nor handed to be published later: send it again only with the same idempotency key", b.ID, err)
	}
	return fmt.Errorf("authz: batch %d is recorded, but its token could not be published yet (%w); authz publishes it as soon as it can: send it again only with the same idempotency key", b.ID, err)
}

// build checks a submission, takes a concurrency slot and records the batch,
// without queueing it. A plain submission of a send_many takes the same
// steps in startPlain and sendChunk (sendmany.go): a step added here for
// every batch belongs there too.
func (ik *intake) build(ctx context.Context, sub *submission) (*built, error) {
	name, l, user, key, idem, force := sub.label, sub.l, sub.user, sub.key, sub.idem, sub.force
	now := ik.now()
	b, err := l.Build(name, user, sub.calls, key, now)
	if err != nil {
		return nil, err
	}
	b.Priority = sub.prio
	if !sub.runAt.IsZero() {
		// Expiry counts from when the batch may run.
		b.RunAt = sub.runAt.UTC()
		if l.Expiry > 0 {
			b.ExpiresAt = b.RunAt.Add(l.Expiry.D()).UTC()
		}
	}
	var id, keyRev uint64
	dup := false
	if idem != "" {
		rep, kid, kdup, rev, err := ik.takeKey(ctx, user, idem, b)
		if rep != nil || err != nil {
			return rep, err
		}
		id, dup, keyRev = kid, kdup, rev
	}
	// refused answers a refusal before the batch's record: a key this
	// submission took is released (it names a batch never recorded).
	refused := func(err error) error {
		if idem != "" && !dup {
			ik.releaseKey(ctx, user, idem, id, keyRev)
		}
		return err
	}
	if key != "" && !force {
		if err := ik.keys.checkKeyBound(ctx, name, l, user, b.Domain, key); err != nil {
			return nil, refused(err)
		}
	}
	if idem == "" {
		if id, err = ik.ids.Next(ctx); err != nil {
			return nil, err
		}
	}
	b.ID, b.CreatedAt = id, now.UTC()
	// A duplicate takes its slot too: the submission it repeats may have
	// died before it took one (reserve keeps a slot already held).
	if err := ik.slots.reserveSlots(ctx, name, l, user, id, force); err != nil {
		return nil, refused(err)
	}
	if dup {
		// Going on under a key taken by another submission, perhaps one
		// refused since (releaseKey): the key must live as long as the
		// batch this records, not expire under it.
		if err := ik.keepKey(ctx, user, idem, id, keyRev); err != nil {
			return nil, err
		}
	}
	// Indexed only once admitted: a submission refused for its label's
	// concurrency leaves no index key behind.
	// The index key and the record are published together, and their
	// PubAcks awaited together.
	index, err := ik.submitters.startIndex(b.Submitter, id)
	if err != nil {
		return nil, err
	}
	first, created, err := submit.CreateAcked(ctx, ik.acks, ik.batches, b, idem, dup)
	if created != nil {
		ik.store.recent.put(b.ID, created)
	}
	if errors.Is(err, jetstream.ErrKeyExists) && idem != "" {
		// A concurrent submission with the same key got the same id as a
		// duplicate and recorded its batch first.
		rec, rerr := ik.store.record(ctx, id)
		if rerr != nil {
			return nil, rerr
		}
		first, dup, err = &rec.Batch, true, nil
	}
	if err != nil {
		return nil, err
	}
	if dup {
		if err := sameSubmission(idem, first, b); err != nil {
			return nil, err
		}
	}
	if err := ik.submitters.indexed(ctx, b.Submitter, id, index); err != nil {
		return nil, err
	}
	if !dup {
		ik.tel.BatchSubmitted(ctx, first)
	}
	// The batch record is the audit trail; a line per batch would cost every
	// submission, and so would building the line's attributes when it is off.
	if ik.log.Enabled(ctx, slog.LevelDebug) {
		ik.log.Debug("batch accepted", "batch_id", first.ID, "label", name, "user", user, "domain", first.Domain, "priority", first.Priority)
	}
	return &built{batch: first, dup: dup}, nil
}

// repeated answers a submission whose idempotency key named a batch
// already; nil when it named none. taken is the key as read when it
// names a batch not recorded (its id 0 otherwise): the submission that
// took the key was refused (its label's concurrency) or cut short before
// its record, and this one goes on under that id (the record's create-only write settles a race with the
// first, still on its way).
func (ik *intake) repeated(ctx context.Context, user, idem string, b *pipeline.Batch) (rep *built, taken idemKey, err error) {
	k, ok, err := ik.store.idempotent(ctx, user, idem)
	if err != nil || !ok {
		return nil, taken, err
	}
	rec, err := ik.store.record(ctx, k.id)
	if ae := (*Error)(nil); errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		if k.taken {
			return nil, k, nil
		}
		// Its batch finished and its record expired; the key is written
		// again once the batch finished, and lives at least as long as
		// the record (expiry).
		return nil, taken, errf(api.CodeConflict, "authz: batch %d, sent with this idempotency key, finished and its record expired; send it with a new idempotency key", k.id)
	}
	if err != nil {
		return nil, taken, err
	}
	if err := sameSubmission(idem, &rec.Batch, b); err != nil {
		return nil, taken, err
	}
	return &built{batch: &rec.Batch, dup: true, terminal: rec.Status.Terminal()}, taken, nil
}

// takeKey takes user's idempotency key idem for a new batch: an id from
// this replica's reserved block, and a create-only write of the key naming
// it, before anything else is written for the batch, so that a repeat (or
// a concurrent duplicate) gets the same id. A key already written is
// read instead (repeated): rep answers a repeat of a recorded batch; dup
// says the submission goes on as a duplicate under the id the key names,
// its batch not recorded (the id drawn is not used). rev is the key's
// revision, as written or as read.
func (ik *intake) takeKey(ctx context.Context, user, idem string, b *pipeline.Batch) (rep *built, id uint64, dup bool, rev uint64, err error) {
	if id, err = ik.ids.Next(ctx); err != nil {
		return nil, 0, false, 0, err
	}
	w, err := ik.startKey(user, idem, id)
	if err == nil {
		rev, err = w.Wait(ctx)
	}
	switch {
	case err == nil:
		return nil, id, false, rev, nil
	case !errors.Is(err, jetstream.ErrKeyExists):
		return nil, 0, false, 0, fmt.Errorf("authz: take idempotency key: %w", err)
	}
	rep, taken, err := ik.repeated(ctx, user, idem, b)
	switch {
	case rep != nil || err != nil:
		return rep, 0, false, 0, err
	case taken.id == 0: // it expired between the write and the read
		return nil, 0, false, 0, errf(api.CodeUnavailable, "authz: idempotency key %q expired as it was read; send it again", logging.Capped(idem))
	}
	return nil, taken.id, true, taken.rev, nil
}

// releaseKeyTimeout bounds releaseKey's write.
const releaseKeyTimeout = 5 * time.Second

// keepKey has user's idempotency key idem, which names batch id taken
// and which a duplicate going on under that id is about to record, live
// until the batch finished (no time to live), as a key this submission
// took would: a refused submission's release gave it one
// (releaseKey), and a key expiring under a batch not finished would let
// a resend with it record a second batch. Compare-and-set on the
// revision takeKey read it at (rev), read again only on a conflict, so a
// release racing it loses or is undone. A key that no longer says taken
// for id is left as it is.
func (ik *intake) keepKey(ctx context.Context, user, idem string, id, rev uint64) error {
	key := streams.IdempotencyKey(user, idem)
	want := idempotencyValue(id, true)
	for range 5 {
		_, err := ik.batches.Update(ctx, key, want, rev)
		switch {
		case err == nil:
			return nil
		case !errors.Is(err, jetstream.ErrKeyExists) && !jsapi.IsRevisionConflict(err):
			return fmt.Errorf("authz: keep idempotency key: %w", err)
		}
		e, err := ik.batches.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("authz: keep idempotency key: %w", err)
		}
		if !bytes.Equal(e.Value(), want) {
			return nil
		}
		rev = e.Revision()
	}
	return errf(api.CodeUnavailable, "authz: idempotency key %q is being written by another submission; send it again", logging.Capped(idem))
}

// releaseKey has user's idempotency key idem, which names batch id and
// which this submission took (at revision rev) and was then refused
// before anything else was written for the batch, expire as a finished
// batch's key does (finished_max_age from now), unless it was written
// since. A retry within that time goes on under id, as before; after it
// the key is new again. Without it, the key of a submission refused for
// its label's concurrency or its key's bound, whose caller then gave up,
// stayed taken for good. A failure is logged: the key then stays taken
// until a retry records its batch.
func (ik *intake) releaseKey(ctx context.Context, user, idem string, id, rev uint64) {
	ttl := ik.store.retention.TTL(time.Time{}, ik.now(), false)
	if ttl == 0 || rev == 0 {
		return // records do not expire: neither do keys
	}
	// Whatever ended the request (a refusal for its deadline included),
	// the release is written.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseKeyTimeout)
	defer cancel()
	_, err := streams.PutKeyTTL(ctx, ik.js, streams.BucketBatches, streams.IdempotencyKey(user, idem), idempotencyValue(id, true), rev, ttl)
	if err != nil && !errors.Is(err, streams.ErrConflict) {
		ik.log.Warn("the idempotency key of a refused submission stays taken until a retry records its batch", "batch_id", id, "err", err)
	}
}

// startKey publishes the create-only write of user's idempotency key idem
// naming batch id, taken (not recorded yet); Wait gives its answer, an
// error matching jetstream.ErrKeyExists when the key exists.
func (ik *intake) startKey(user, idem string, id uint64) (*submit.PendingCreate, error) {
	return submit.StartCreateKey(ik.acks, ik.batches, streams.IdempotencyKey(user, idem), idempotencyValue(id, true))
}

// sameSubmission refuses, as a conflict, a submission that reuses the
// idempotency key of a different one: another label, key, function type,
// payload or expected confirmation. A retry must ask for the same thing.
func sameSubmission(idem string, first, again *pipeline.Batch) error {
	if fingerprint(first) != fingerprint(again) {
		return errf(api.CodeConflict, "authz: idempotency key %q was used for batch %d, a different submission (label, key or functions differ); a new submission needs a new key", logging.Capped(idem), first.ID)
	}
	return nil
}

// fingerprint identifies what a submission asks for: its label, its key and
// each function's type, payload and expected confirmation. Payloads are
// compared as the JSON values they are, whatever order their keys were
// stored in.
func fingerprint(b *pipeline.Batch) [sha256.Size]byte {
	h := sha256.New()
	field := func(v []byte) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(v)))
		h.Write(v)
	}
	field([]byte(b.Label))
	field([]byte(b.Key))
	for _, f := range b.Functions {
		field([]byte(f.Type))
		p, err := json.Marshal(f.Payload)
		if err != nil {
			p = f.Payload // not valid msgpack: compare the bytes
		}
		field(p)
		var expect string
		if f.Confirm != nil {
			expect = f.Confirm.Expect
		}
		field([]byte(expect))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}
