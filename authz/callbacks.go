package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// Callbacks reach authz on the CALLBACKS consumer and are applied in
// groups (callbackBatcher); a callback is acknowledged only once its batch
// record says so, so callbacks published while authz was down are applied
// when it is back. A callback that cannot be applied is retried with
// increasing delays (retryCallback).

// delivery is a delivered message of callbacks: one callback, or a group
// of them (records.CallbackGroup). It is acknowledged once every callback
// in it is applied (or dead-lettered alone), and put back, with the
// longest delay one of them asked for, when one is to be tried again:
// the others, applied meanwhile, then find their records terminal.
type delivery struct {
	m jetstream.Msg
	// held acknowledges m (callbackApplier.held).
	held       *jsapi.HeldAck
	group      bool
	deliveries int
	published  time.Time

	mu    sync.Mutex
	left  int // callbacks not settled yet
	nak   bool
	delay time.Duration
}

// done settles one callback of d: retry asks for the message again after
// delay. The last one settles the message.
func (d *delivery) done(retry bool, delay time.Duration) {
	d.mu.Lock()
	d.left--
	if retry {
		d.nak, d.delay = true, max(d.delay, delay)
	}
	last, nak, delay := d.left == 0, d.nak, d.delay
	d.mu.Unlock()
	if !last {
		return
	}
	if nak {
		_ = d.m.NakWithDelay(delay)
		return
	}
	_ = d.held.Ack(d.m)
}

// received is a delivered callback, decoded: the message's only one, or
// a member of its group.
type received struct {
	d  *delivery
	cb records.Callback
}

// receive decodes m and returns its callbacks that are to be applied,
// each with the span of its application. The others were dealt with: a
// callback that names another domain than its subject is refused (as
// applied), an unreadable message left to retryCallback, a group beyond
// records.CallbackGroupMax dead-lettered whole.
func (ca *callbackApplier) receive(ctx context.Context, m jetstream.Msg) []received {
	d := &delivery{m: m, held: &ca.held, deliveries: 1}
	if md, err := jsapi.DeliveryOf(m.Reply()); err == nil {
		d.deliveries, d.published = int(md.NumDelivered), md.Timestamp
	}
	cbs, group, err := records.DecodeCallbacks(m.Data())
	if err != nil {
		// Nothing in it is trusted, not even of a newer version: its
		// headers say which batch it is about, and it is handled whole
		// (a dead letter keeps its bytes as they are).
		var v uint8
		if len(cbs) > 0 {
			v = cbs[0].V
		}
		d.left = 1
		ca.retryCallback(ctx, &received{d: d}, unreadable("callback", v, err))
		return nil
	}
	domain, ok := streams.CallbackDomain(m.Subject())
	if len(cbs) > records.CallbackGroupMax {
		// A processor is trusted for its domain only: one message of its
		// costs authz no more than records.CallbackGroupMax callbacks. The
		// group goes whole to the DLQ, where the owner sees it and its
		// replay applies every callback in it.
		d.left = 1
		ca.log.Error("callback group refused: too many callbacks in one message", "subject", logging.Capped(m.Subject()), "callbacks", len(cbs), "max", records.CallbackGroupMax)
		ca.deadLetterCallback(ctx, &received{d: d, cb: records.Callback{Domain: domain}}, d.deliveries,
			fmt.Errorf("%w: a group of %d callbacks, and authz applies at most %d from one message", ErrCallbackGroup, len(cbs), records.CallbackGroupMax))
		return nil
	}
	d.group, d.left = group, len(cbs)
	out := make([]received, 0, len(cbs))
	for _, cb := range cbs {
		if !ok || domain != cb.Domain {
			// The subject is what nats.conf can grant per domain; a callback
			// that names another domain than its subject is not applied.
			ca.log.Error("callback refused: its subject and its domain differ", "subject", logging.Capped(m.Subject()), "domain", logging.Capped(cb.Domain), "batch_id", cb.BatchID)
			d.done(false, 0)
			continue
		}
		if cb.At.IsZero() {
			// A processor that finished a batch in its first step wrote no
			// progress record, hence no time: the callback's publication is
			// when the batch finished.
			cb.At = d.published
		}
		out = append(out, received{d: d, cb: cb})
	}
	return out
}

// settle ends the handling of a callback that apply (or its group) got
// through with err: acknowledged, or retried later.
func (ca *callbackApplier) settle(ctx context.Context, r *received, recorded bool, err error) {
	if err != nil {
		ca.retryCallback(ctx, r, err)
		return
	}
	if recorded && ca.tel != nil && ca.table().hasDomain(r.cb.Domain) {
		// Only then is the domain label one of a bounded set, not
		// whatever a callback named.
		ca.tel.CallbackApplied(r.cb.Domain, r.d.published)
	}
	r.d.done(false, 0)
}

// callbackApplier applies the processors' terminal callbacks to their
// batches' records, in groups (callbatch.go) or alone, releases what a
// finished batch held (its slots, its sender, its key), and retries or
// dead-letters a callback that cannot be applied (poison.go).
type callbackApplier struct {
	js   jetstream.JetStream
	nc   *nats.Conn
	acks *jsapi.AckPublisher
	// consumer delivers the callbacks.
	consumer jetstream.Consumer
	store    *recordStore
	slots    *slotKeeper
	senders  *senderPool
	keys     *keyOrders
	table    func() *Table
	now      func() time.Time
	log      *slog.Logger
	tel      *telemetry.Telemetry
	// concurrency bounds the callbacks applied at once
	// (Options.Concurrency); backoff is Options.CallbackBackoff.
	concurrency int
	// groups bounds the groups of callbacks applied at once
	// (callbackGroups).
	groups  int
	backoff []time.Duration
	// held acknowledges the callbacks applied, holding back the newest
	// one's acknowledgement so that CALLBACKS, which removes what is
	// acknowledged, does not empty after every callback (jsapi.HeldAck).
	held jsapi.HeldAck
}

// Apply records a terminal callback on its batch. It is idempotent: a
// record already terminal is left as it is, so a repeated callback changes
// nothing. A batch record that cannot be read (malformed, or of a newer
// wire version) gives an error matching ErrUnreadable.
func (s *Service) Apply(ctx context.Context, cb *records.Callback) error {
	_, err := s.applier.apply(ctx, cb)
	return err
}

// apply is Apply; recorded says the batch has a record in the callback's
// domain (the callback applied now or before).
func (ca *callbackApplier) apply(ctx context.Context, cb *records.Callback) (recorded bool, err error) {
	c := ca.callbackChange(cb)
	rec, err := ca.store.updateRecord(ctx, cb.BatchID, c.change)
	if errors.Is(err, errUnrecorded) {
		ca.log.Error("callback for an unrecorded batch ignored", "batch_id", cb.BatchID)
		return false, nil
	}
	recorded = c.recorded && err == nil
	if c.batchDomain != "" {
		ca.log.Error("callback refused: the batch belongs to another domain", "batch_id", cb.BatchID, "domain", logging.Capped(cb.Domain), "batch_domain", c.batchDomain)
		return false, err
	}
	if err != nil {
		return false, err
	}
	if rec != nil {
		ca.noteFinished(ctx, &c, rec)
		if rec.Status.Terminal() {
			// Written terminal now: its keys were rewritten just before
			// (keyBeforeTerminal). A repeated callback, which wrote
			// nothing, writes them in the release, in case an earlier
			// version wrote the record and died before its keys.
			c.expire = nil
		}
	}
	return recorded, ca.releaseFinished(ctx, &c)
}

// callbackChange is the change a callback makes to its batch record, and
// what it found there; change may run more than once (updateRecord), so it
// sets every finding on each run.
type callbackChange struct {
	a  *callbackApplier
	cb *records.Callback
	at time.Time
	// recorded says the record is in the callback's domain.
	recorded bool
	// sender says the batch may hold a sender to release.
	sender bool
	// batchDomain is the record's domain when it is not the callback's.
	batchDomain string
	// finishedLabel and key are the batch's label and key once the record
	// is terminal: what releaseFinished releases.
	finishedLabel string
	// finishedBy is the batch's submitter, with finishedLabel.
	finishedBy string
	key        keyed
	// expire, once the record is terminal, is what its keys need to
	// expire with it (releaseFinished writes them).
	expire *expiry
}

func (ca *callbackApplier) callbackChange(cb *records.Callback) callbackChange {
	at := cb.At
	if at.IsZero() {
		at = ca.now()
	}
	return callbackChange{a: ca, cb: cb, at: at}
}

// change makes rec terminal with the callback's outcome; it writes nothing
// to a record already terminal (a repeated callback) or of another domain.
func (c *callbackChange) change(rec *records.BatchRecord) (bool, error) {
	cb := c.cb
	c.batchDomain, c.finishedLabel, c.finishedBy, c.key, c.expire = "", "", "", keyed{}, nil
	c.recorded = rec.Batch.Domain == cb.Domain
	c.sender = rec.Batch.NeedsSender() && c.recorded
	if rec.Status.Terminal() {
		// Applied before: a repeated callback. Its slot release may be
		// what failed the first time, so it is done again.
		c.finishedLabel, c.finishedBy, c.key = rec.Batch.Label, rec.Batch.Submitter, keyOf(&rec.Batch)
		if c.recorded {
			c.expire = c.a.store.expiryOf(rec)
		}
		return false, nil
	}
	if rec.Batch.Domain != cb.Domain {
		c.batchDomain = rec.Batch.Domain
		return false, nil
	}
	o := cb.Outcome
	rec.Status, rec.Outcome, rec.Attempts = o.Status, &o, cb.Attempts
	rec.Fallback, rec.DeadLetter = cb.Fallback, cb.DeadLetter
	rec.UpdatedAt = c.a.now().UTC()
	rec.FinishedAt = c.at.UTC()
	c.expire = c.a.store.expiryOf(rec)
	rec.History = append(rec.History, records.Event{At: c.at.UTC(), What: records.EventCallback,
		Detail: o.String() + " from " + cb.Processor + " after " + strconv.Itoa(cb.Attempts) + " attempts"})
	c.a.keepOutputs(rec, cb.Outputs)
	return true, nil
}

// outputsHeadroom is kept free of max_payload beside a batch record for
// the message's headers.
const outputsHeadroom = 4 << 10

// keepOutputs puts a terminal callback's outputs in rec, for the
// submitter. They fitted beside the batch in the processor's progress
// record, but the batch record also holds its history: should the whole
// not fit in the server's max_payload, the outputs keep their index and
// type, their data is left out, and the history says so. The record is
// encoded here only when a cheap upper bound says it might not fit.
func (ca *callbackApplier) keepOutputs(rec *records.BatchRecord, outs []pipeline.Output) {
	rec.Outputs = outs
	if len(outs) == 0 {
		return
	}
	limit := int(ca.nc.MaxPayload()) - outputsHeadroom
	est := 1<<10 + len(rec.IdempotencyKey) + len(rec.Batch.Key)
	for _, f := range rec.Batch.Functions {
		est += len(f.Payload) + len(f.Type) + 256
	}
	for _, e := range rec.History {
		est += len(e.What) + len(e.Detail) + 32
	}
	for _, o := range outs {
		est += len(o.Data) + len(o.Type) + len(o.Ref) + 48
	}
	if est <= limit {
		return
	}
	data, err := records.Encode(rec)
	if err == nil && len(data) <= limit {
		return
	}
	trimmed := make([]pipeline.Output, len(outs))
	for i, o := range outs {
		trimmed[i] = pipeline.Output{Index: o.Index, Type: o.Type, Ref: o.Ref}
	}
	rec.Outputs = trimmed
	rec.History = append(rec.History, records.Event{At: rec.UpdatedAt, What: "outputs trimmed",
		Detail: fmt.Sprintf("the outputs' data is left out: the record would take %d bytes, and the server's max_payload of %d bytes leaves room for %d", len(data), ca.nc.MaxPayload(), limit)})
}

// noteFinished notes that the callback made rec terminal.
func (ca *callbackApplier) noteFinished(ctx context.Context, c *callbackChange, rec *records.BatchRecord) {
	if ca.log.Enabled(ctx, slog.LevelDebug) {
		// The processor logs each finished batch at Info; this is its echo.
		ca.log.Debug("batch finished", "batch_id", c.cb.BatchID, "outcome", c.cb.Outcome.String(), "domain", c.cb.Domain)
	}
	ca.tel.BatchFinished(ctx, &rec.Batch, c.cb.Outcome)
	c.finishedLabel, c.finishedBy, c.key = rec.Batch.Label, rec.Batch.Submitter, keyOf(&rec.Batch)
	ca.announceOutcome(rec)
}

// announceOutcome tells the submitter's waiters (client.Wait) that the
// batch of rec finished: a core NATS message on its OutcomeSubject, the
// outcome as its body. It is a hint, at most once: the record, written
// before, is what a waiter reads, and a waiter that missed the message
// (a reconnect) reads the record again.
func (ca *callbackApplier) announceOutcome(rec *records.BatchRecord) {
	if rec.Outcome == nil || pipeline.ValidateDomain(rec.Batch.Submitter) != nil {
		return // no subject names this submitter
	}
	if err := ca.nc.Publish(streams.OutcomeSubject(rec.Batch.Submitter, rec.Batch.ID), []byte(rec.Outcome.String())); err != nil {
		ca.log.Warn("outcome not announced; waiters read it from the record", "batch_id", rec.Batch.ID, "err", err)
	}
}

// releasing says whether releaseFinished has anything to release.
func (ca *callbackApplier) releasing(c *callbackChange) bool {
	if c.sender || c.key.key != "" || ca.store.writes(c.expire) {
		return true
	}
	l, ok := ca.table().Labels[c.finishedLabel]
	return ok && (l.MaxConcurrent > 0 || l.MaxPerSubmitter > 0)
}

// releaseFinished frees what the batch of a terminal record held.
func (ca *callbackApplier) releaseFinished(ctx context.Context, c *callbackChange) error {
	id := c.cb.BatchID
	// The record is terminal: free the batch's concurrency slot. Until that
	// is done the callback is not acknowledged, so a release that failed
	// (or a crash right after the record's write) is tried again with the
	// redelivered callback, which finds the record terminal and comes here.
	if l, ok := ca.table().Labels[c.finishedLabel]; ok && l.MaxConcurrent > 0 {
		if err := ca.slots.release(ctx, labelSlots(c.finishedLabel), id); err != nil {
			return fmt.Errorf("authz: release the slot of batch %d: %w", id, err)
		}
	}
	if l, ok := ca.table().Labels[c.finishedLabel]; ok && l.MaxPerSubmitter > 0 {
		if err := ca.slots.release(ctx, submitterSlots(c.finishedLabel, c.finishedBy), id); err != nil {
			return fmt.Errorf("authz: release the submitter's slot of batch %d: %w", id, err)
		}
	}
	if c.sender {
		if err := ca.senders.release(ctx, c.cb.Domain, id); err != nil {
			return err
		}
	}
	// Its index and idempotency keys go with its record.
	if c.expire != nil {
		if err := ca.store.expireKeys(ctx, c.expire); err != nil {
			return err
		}
	}
	// Likewise its key: the next batch of the key gets its token.
	return c.key.release(ctx, ca.keys, id)
}
