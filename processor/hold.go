package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

// A step that cannot proceed is put back on its token (NAK with a delay)
// and tried again. Two reasons for that are bounded here, so that neither
// becomes a loop:
//
//   - the workers did not attempt the call (busy, no answer, no worker):
//     not a failure of the function, so no attempt is counted; past
//     Options.MaxWait the function fails permanently;
//   - the token cannot be reconciled with the batch's records (ahead of its
//     progress, a record that does not decode): poison, retried
//     Options.PoisonRetries times in case the records catch up, then the
//     batch is finished as failed with a dead letter.

// tokenID names a token message across its redeliveries.
type tokenID struct {
	stream string
	seq    uint64
}

func tokenOf(m jetstream.Msg) tokenID {
	md, err := jsapi.DeliveryOf(m.Reply())
	if err != nil {
		return tokenID{stream: m.Subject()}
	}
	return tokenID{stream: md.Stream, seq: md.StreamSeq}
}

// holding is how long and how often one token was put back for one reason.
type holding struct {
	why   string
	since time.Time
	tries int
}

// holds remembers, per token, the reason it was last put back. It lives in
// memory: a processor that restarts starts counting again, which only
// lengthens the bounds.
type holds struct {
	mu sync.Mutex
	m  map[tokenID]*holding
}

// maxHolds bounds the tokens remembered; past it an arbitrary one is
// forgotten (its count starts over).
const maxHolds = 16384

// note counts one more put-back of token id for why and returns the
// holding; a different reason than last time starts a new count.
func (h *holds) note(id tokenID, why string, now time.Time) holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[tokenID]*holding{}
	}
	e := h.m[id]
	if e == nil || e.why != why {
		if e == nil && len(h.m) >= maxHolds {
			for k := range h.m {
				delete(h.m, k)
				break
			}
		}
		e = &holding{why: why, since: now}
		h.m[id] = e
	}
	e.tries++
	return *e
}

// forget drops what is remembered of token m, cheaply when nothing is.
func (h *holds) forget(m jetstream.Msg) {
	h.mu.Lock()
	empty := len(h.m) == 0
	h.mu.Unlock()
	if empty {
		return
	}
	id := tokenOf(m)
	h.mu.Lock()
	delete(h.m, id)
	h.mu.Unlock()
}

// backoff is base doubled per try after the first, capped, with ±20%
// jitter drawn from rnd (in [0, 1)).
func backoff(try int, base, ceiling time.Duration, rnd func() float64) time.Duration {
	d := base
	for i := 1; i < try && d < ceiling; i++ {
		d *= 2
	}
	d = min(d, ceiling)
	return time.Duration(float64(d) * (0.8 + 0.4*rnd()))
}

// errBusy means a worker answered that it did not attempt the call: it runs
// elsewhere, no handler slot was free, or its record was unreadable.
var errBusy = errors.New("processor: call not attempted")

// errNoWorker means no worker serves the request's subject.
var errNoWorker = errors.New("processor: no worker serves this function type")

// errNoAnswer means no worker answered within the work timeout: one may be
// running the call still (its completion record will answer a retry), or
// its reply was lost.
var errNoAnswer = errors.New("processor: no worker answered")

// notAttempted reports whether err says the workers did not attempt the
// call, which is retried later without counting an attempt.
func notAttempted(err error) bool {
	return errors.Is(err, errBusy) || errors.Is(err, errNoWorker) || errors.Is(err, errNoAnswer)
}

// Bounds of the delays of a step whose call was not attempted.
const (
	waitBase    = 250 * time.Millisecond
	waitCeiling = 10 * time.Second
)

// wait puts back a step whose call the workers did not attempt, with a
// growing delay and no attempt counted. Past Options.MaxWait without an
// attempt, the function fails permanently instead.
func (s *stepper) wait(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg, cause error) (api.Action, error) {
	prog := &st.Progress
	id := tokenOf(m)
	why := fmt.Sprintf("unattempted gen %d step %d next %d failures %d fallback %v", prog.Gen, prog.Rotation, prog.Next, prog.FailuresOf(prog.Next), prog.FallbackDue != nil)
	now := s.opts.Now()
	h := s.holds.note(id, why, now)
	if now.Sub(h.since) < s.opts.MaxWait {
		delay := backoff(h.tries, waitBase, waitCeiling, s.opts.Rand)
		s.log.Debug("call not attempted; tried again later", "batch_id", b.ID, "tries", h.tries, "delay", delay, "reason", cause)
		s.recordWaiting(ctx, b, st, cause, h.since, now)
		return api.ActionBusy, m.NakWithDelay(delay)
	}
	s.holds.forget(m)
	msg := fmt.Sprintf("function %d: not attempted by any worker within %s: %v", prog.Next, s.opts.MaxWait, cause)
	s.log.Error("no worker attempted the call in time: the function fails", "batch_id", b.ID, "index", prog.Next, "waited", now.Sub(h.since), "tries", h.tries, "err", cause)
	st.noWait = true
	if prog.FallbackDue != nil {
		return s.settle(ctx, b, st, failure{index: prog.FallbackDue.Index, msg: msg, exhausted: prog.FallbackDue.Exhausted}, m)
	}
	if b.Subroutine.Mode == pipeline.Atomic {
		prog.AddFailure(0)
		setError(prog, msg)
		return s.settle(ctx, b, st, failure{index: 0, msg: msg}, m)
	}
	return s.functionFailed(ctx, b, st, failure{index: prog.Next, msg: msg}, m)
}

// busyUnrecorded is how long the workers may be busy, or silent, before
// a batch's progress says it waits for them: a short wait under load is
// normal and costs no write, a batch that no worker serves says so at once.
const busyUnrecorded = waitCeiling

// waitingOf says why the workers did not attempt b's next call, or nil
// while that is not worth a record yet. The reason holds no count nor
// duration, so that a batch that keeps waiting for the same reason is
// written once.
func waitingOf(b *pipeline.Batch, prog *records.Progress, cause error, held time.Duration) *records.Waiting {
	var typ, what string
	switch {
	case prog.FallbackDue != nil && prog.FallbackDue.Index < len(b.Functions):
		typ = b.Functions[prog.FallbackDue.Index].Type
		what = "the fallback of `" + typ + "`"
	case b.Subroutine.Mode == pipeline.Atomic:
		what = "atomic units"
	case prog.Next < len(b.Functions):
		typ = b.Functions[prog.Next].Type
		what = "`" + typ + "`"
	default:
		return nil
	}
	var reason string
	switch {
	case errors.Is(cause, errNoWorker):
		reason = "no worker serves " + what
	case held < busyUnrecorded:
		return nil
	case errors.Is(cause, errNoAnswer):
		reason = "no worker answered a call of " + what
	default:
		reason = "every worker of " + what + " is busy"
	}
	return &records.Waiting{Reason: reason, Type: typ}
}

// recordWaiting writes in b's progress why no worker attempts its call,
// once per reason: a batch that waits on writes nothing more until the
// reason changes or the batch moves on (the next progress write clears
// it). The first record of a reason is logged and counted. A write that
// fails is not the step's failure: the token is put back all the same, and
// a later put-back tries again.
func (s *stepper) recordWaiting(ctx context.Context, b *pipeline.Batch, st *state, cause error, since, now time.Time) {
	w := waitingOf(b, &st.Progress, cause, now.Sub(since))
	if w == nil || (st.Waiting != nil && st.Waiting.Reason == w.Reason) {
		return
	}
	w.Since = since.UTC()
	prev := st.Waiting
	st.Waiting, st.waiting = w, true
	err := s.save(ctx, st)
	st.waiting = false
	if err != nil {
		st.Waiting = prev
		s.log.Debug("waiting reason not recorded", "batch_id", b.ID, "err", err)
		return
	}
	s.log.Warn("batch waits for a worker", "batch_id", b.ID, "domain", b.Domain, "type", w.Type, "reason", w.Reason, "since", w.Since)
	s.opts.Telemetry.WaitingForWorker(b.Domain, w.Type)
}

// Bounds of the delays of a poison token.
const (
	poisonBase    = 250 * time.Millisecond
	poisonCeiling = time.Minute
)

// poisoned puts back a token that cannot be reconciled with the batch's
// records, with a growing delay, in case they catch up (an owner's edit
// half done); after Options.PoisonRetries it finishes the batch as failed,
// with a dead letter naming the reason and one callback.
func (s *stepper) poisoned(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg, cause error) (api.Action, error) {
	id := tokenOf(m)
	h := s.holds.note(id, "poison", s.opts.Now())
	if h.tries <= s.opts.PoisonRetries {
		delay := backoff(h.tries, poisonBase, poisonCeiling, s.opts.Rand)
		s.log.Debug("token cannot be reconciled with its records; tried again later", "batch_id", b.ID, "tries", h.tries, "delay", delay, "err", cause)
		return api.ActionHeld, m.NakWithDelay(delay)
	}
	s.holds.forget(m)
	prog := &st.Progress
	msg := capMessage(cause.Error())
	s.log.Error("batch dead-lettered: its token cannot be reconciled with its records", "batch_id", b.ID, "tries", h.tries, "err", msg)
	prog.State, prog.Parked, prog.FallbackDue = records.Queued, nil, nil
	setError(prog, msg)
	prog.FailedIndex = prog.Next
	return api.ActionFinished, s.finish(ctx, b, st, pipeline.FailedAfter(prog.Next, msg), m)
}

// maxMessage caps an error message kept in progress, dead letters and
// callbacks: handler errors are untrusted and unbounded, and every record
// must fit the server's max_payload.
const maxMessage = 4 << 10

func capMessage(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	n := maxMessage
	for n > 0 && s[n]&0xC0 == 0x80 { // back to the start of a UTF-8 sequence
		n--
	}
	return s[:n] + "… (truncated)"
}

func setError(prog *records.Progress, msg string) { prog.LastError = capMessage(msg) }
