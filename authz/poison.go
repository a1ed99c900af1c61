package authz

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// DefaultCallbackBackoff is the default of Options.CallbackBackoff: a
// callback whose record cannot be read is tried six times over about eight
// minutes, long enough for a rolling upgrade to bring up a replica that
// reads it, then dead-lettered.
var DefaultCallbackBackoff = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 2 * time.Minute, 5 * time.Minute}

// maxTransientDelay caps the delay before retrying a callback that failed
// for a passing reason (the store unreachable, a conflict), so callbacks
// are applied soon after the store is back.
const maxTransientDelay = 5 * time.Second

// transientDelay is the first delay before retrying such a callback.
const transientDelay = 250 * time.Millisecond

// maxReason caps the error text a dead letter carries: part of it comes
// from bytes nobody vouches for.
const maxReason = 512

// retryCallback puts back a callback that could not be applied, after a
// delay that grows with its deliveries. One that cannot be read, or whose
// batch record cannot be, is dead-lettered once Options.CallbackBackoff is
// exhausted; any other failure is retried without end, the delay capped.
func (ca *callbackApplier) retryCallback(ctx context.Context, r *received, err error) {
	backoff, deliveries, cb := ca.backoff, r.d.deliveries, &r.cb
	delay := backoff[min(max(deliveries, 1), len(backoff))-1]
	if !errors.Is(err, ErrUnreadable) {
		// A passing failure (a lost write race, a store electing its
		// leader): soon again, backing off from 250 ms to maxTransientDelay.
		delay = min(transientDelay<<min(max(deliveries-1, 0), 10), maxTransientDelay)
		ca.log.Warn("callback not applied yet; retried later", "batch_id", cb.BatchID, "deliveries", deliveries, "delay", delay, "err", err)
		r.d.done(true, delay)
		return
	}
	if deliveries > len(backoff) {
		ca.deadLetterCallback(ctx, r, deliveries, err)
		return
	}
	// Expected for a moment during a rolling upgrade (a newer replica
	// applies it): no warning until the retries are spent.
	ca.log.Debug("callback not applied: record unreadable; retried later", "batch_id", cb.BatchID, "deliveries", deliveries, "delay", delay, "err", err)
	r.d.done(true, delay)
}

// deadLetterCallback moves a callback that could not be applied to the DLQ,
// where the owner sees it (dlq) and replays it once the record is readable,
// then settles it. The dead letter is deduplicated by the callback's
// stream sequence (and, for a member of a group, its batch id), so a
// crash between the two repeats nothing. A member of a group goes alone,
// encoded as a single callback: its replay reads it as any other.
func (ca *callbackApplier) deadLetterCallback(ctx context.Context, r *received, deliveries int, cause error) {
	m, cb := r.d.m, &r.cb
	var seq uint64
	if md, err := jsapi.DeliveryOf(m.Reply()); err == nil {
		seq = md.StreamSeq
	}
	id, domain := cb.BatchID, cb.Domain
	if id == 0 {
		id, _ = strconv.ParseUint(m.Headers().Get(streams.HeaderBatchID), 10, 64)
	}
	if pipeline.ValidateDomain(domain) != nil {
		// The subject is callbacks.<domain>: a valid token, or the server
		// would not have stored it.
		domain = m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
	}
	reason := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, fmt.Sprintf("callback not applied after %d deliveries: %v", deliveries, cause))
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "") + "…"
	}
	at := cb.At
	if at.IsZero() {
		at = ca.now()
	}
	dl := &records.DeadLetter{
		Batch:  pipeline.Batch{ID: id, Domain: domain, Priority: cb.Priority},
		Domain: domain, Error: reason, Attempts: cb.Attempts, Outcome: cb.Outcome, At: at.UTC(),
		Origin: records.Origin{Stream: streams.StreamCallbacks, Subject: m.Subject(), Seq: seq},
	}
	// Acknowledging the callback removes it from CALLBACKS: its bytes go
	// with the dead letter, for the replay.
	dl.Callback = m.Data()
	kind, msgID := "callback", streams.CallbackDeadLetterMsgID(seq)
	var err error
	switch {
	case r.d.group:
		dl.Callback, err = records.Encode(cb)
		msgID = streams.CallbackMemberDeadLetterMsgID(seq, id)
	case errors.Is(cause, ErrCallbackGroup):
		kind = streams.KindCallbacks
	}
	var data []byte
	if err == nil {
		data, err = records.Encode(dl)
	}
	if err == nil {
		msg := nats.NewMsg(streams.DLQSubject(domain))
		msg.Data = data
		msg.Header.Set(streams.HeaderBatchID, strconv.FormatUint(id, 10))
		msg.Header.Set(streams.HeaderDomain, domain)
		msg.Header.Set(streams.HeaderKind, kind)
		if cb.Outcome.Status != "" {
			msg.Header.Set(streams.HeaderOutcome, cb.Outcome.String())
		}
		msg.Header.Set(streams.HeaderReason, reason)
		msg.Header.Set(streams.HeaderOrigin, m.Subject())
		msg.Header.Set(nats.MsgIdHdr, msgID)
		var ack *jetstream.PubAck
		if ack, err = ca.js.PublishMsg(ctx, msg); err == nil {
			attrs := []any{"batch_id", id, "domain", domain, "deliveries", deliveries, "dlq_seq", ack.Sequence, "err", cause}
			var ue *unreadableError
			if errors.As(cause, &ue) && ue.version != 0 {
				attrs = append(attrs, "version", ue.version, "reads_version", records.WireVersion)
			}
			what := "callback dead-lettered: a record it needs is unreadable; replay it once it is readable"
			if kind == streams.KindCallbacks {
				what = "callback group dead-lettered: more callbacks than authz applies from one message; replay it to apply them"
			}
			ca.log.Error(what, attrs...)
			r.d.done(false, 0)
			return
		}
	}
	ca.log.Warn("callback not dead-lettered; retried later", "batch_id", id, "err", err)
	r.d.done(true, ca.backoff[len(ca.backoff)-1])
}
