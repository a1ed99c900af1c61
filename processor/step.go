package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// state is a progress record and the revision it was read at (0: absent),
// with what the step learnt along the way.
type state struct {
	streams.ProgressEntry
	// fresh says this step's call ran under a completion key nobody had
	// held before, and its record is written (records.WorkReply.Fresh).
	fresh bool
	// noWait says the step gave up waiting for workers: a fallback no
	// worker attempts counts as none.
	noWait bool
	// sender is the sender the batch holds, for functions that need one.
	sender string
	// waiting says this write records why the batch waits for a worker:
	// every other write clears that reason.
	waiting bool
}

// failure is a failed attempt of function index (an atomic batch: of its
// unit), as the failure chain sees it.
type failure struct {
	index int
	msg   string
	// retryable: the error allows a retry under the retry logic.
	retryable bool
	// invalidated: an effect that took place no longer counts (its
	// confirmation failed), so a retry is a new round, which runs the
	// handler again instead of being answered from the completion record.
	invalidated bool
	// exhausted: the retries are used up (set by the failure chain).
	exhausted bool
}

// conflictDelay is how soon a step that lost a write race runs again. The
// worker's completion record answers the repeated call, so nothing runs twice.
const conflictDelay = 50 * time.Millisecond

// expirySkew is how close to its expiry a batch that succeeded at its first
// step still writes its terminal progress: another processor holding the
// same token (a redelivery) may find it expired meanwhile, by its own clock.
const expirySkew = 10 * time.Second

// stepper runs the steps of a domain's batches, each from its token to
// the writes that settle it: the orchestration over the duties below it.
type stepper struct {
	opts  Options
	log   *slog.Logger
	store *streams.ProgressStore // the progress records, with compare-and-set
	cache *batchCache
	// holds bounds the put-backs of steps that cannot proceed.
	holds holds
	// senders leases the domain's senders to its batches.
	senders *senderPool
	// pub publishes tokens, dead letters and callbacks, a step's last
	// write without waiting (deferred).
	pub *publisher
	// workers sends requests to the workers.
	workers *workClient
	// units gathers the atomic units of concurrent steps into one request.
	units *unitBatcher
	// limits sizes records against the server's max_payload.
	limits recordLimits
	// fault is Options.fault, the crash points of a step.
	fault crashPoints
	// inc waits for the inclusion of dispatches.
	inc *inclusions
}

// step runs one step of the batch the token m points at and reports what
// it did. A step that fails puts its token back for a redelivery soon.
func (s *stepper) step(ctx context.Context, prio pipeline.Priority, m jetstream.Msg) api.StepReport {
	tok, err := records.Decode[records.Token](m.Data())
	if err != nil {
		s.log.Error("undecodable token: dead-lettered", "subject", logging.Capped(m.Subject()), "err", err)
		s.pub.deadLetterRaw(ctx, m, err)
		return api.StepReport{Priority: prio, Action: api.ActionError, Error: err.Error()}
	}
	sr, err := s.stepToken(ctx, prio, m, tok)
	sr.BatchID, sr.Priority = tok.BatchID, prio
	if sr.Action != api.ActionBusy && sr.Action != api.ActionHeld {
		s.holds.forget(m)
	}
	switch {
	case errors.Is(err, errCrash):
		sr.Action, sr.Error = api.ActionAbandoned, err.Error()
	case err != nil:
		s.log.Warn("step failed; token redelivered shortly", "batch_id", tok.BatchID, "err", err)
		delay := time.Second
		if errors.Is(err, streams.ErrConflict) {
			delay = conflictDelay
		}
		_ = m.NakWithDelay(delay)
		sr.Action, sr.Error = api.ActionError, err.Error()
	}
	return sr
}

// stepToken is step for a decoded token. Its error, if any, means the step
// did not settle the token: step puts it back.
func (s *stepper) stepToken(ctx context.Context, prio pipeline.Priority, m jetstream.Msg, tok records.Token) (sr api.StepReport, err error) {
	var b *pipeline.Batch
	if tok.Batch != nil && tok.Batch.ID == tok.BatchID {
		b = tok.Batch // the token's copy: one read saved
	} else {
		b, err = s.cache.get(ctx, tok.BatchID)
	}
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		// A token authz never recorded: a processor may rotate, never create.
		s.log.Warn("token for an unrecorded batch dropped", "batch_id", tok.BatchID, "subject", logging.Capped(m.Subject()))
		err = m.Ack()
		sr.Action = api.ActionStale
		return sr, err
	}
	if errors.Is(err, records.ErrDecode) || errors.Is(err, records.ErrVersion) {
		cause := fmt.Errorf("batch record of batch %d: %w", tok.BatchID, err)
		b = &pipeline.Batch{ID: tok.BatchID, Domain: s.opts.Domain, Priority: prio}
		st, lerr := s.load(ctx, b.ID)
		if st == nil {
			err = lerr
			return sr, err
		}
		sr.Action, err = s.poisoned(ctx, b, st, m, cause)
		sr.Outcome = outcomeOf(&st.Progress)
		return sr, err
	}
	if err != nil {
		return sr, err
	}
	var st *state
	if md, merr := jsapi.DeliveryOf(m.Reply()); merr == nil && md.NumDelivered == 1 && tok.Gen == 0 && tok.Rotation == 0 && !tok.Again && b.RunAt.IsZero() {
		// A new batch's first delivery: it has no progress unless the owner
		// evicted or moved it meanwhile, and then the first progress write
		// (a create) fails, and the step runs again with the record read.
		// Not for a token marked Again: a copy of a first token that may
		// have run already (a failed run leaves no completion record to
		// answer a second one, only its progress).
		// One read saved per batch; the worker's record answers the rerun.
		// Not for a scheduled batch: its token reaches the queue when its
		// schedule fires, long after the send, and a cancel or evict that
		// came as it fired may not have found it there.
		st = &state{ProgressEntry: streams.ProgressEntry{Progress: records.Progress{BatchID: b.ID, State: records.Queued}}}
	} else if st, err = s.load(ctx, b.ID); err != nil {
		if st != nil { // a record that does not decode
			sr.Action, err = s.poisoned(ctx, b, st, m, err)
			sr.Outcome = outcomeOf(&st.Progress)
		}
		return sr, err
	}
	prog := &st.Progress
	switch {
	case prog.State == records.Done:
		// Terminal already: a crash may have come between the progress write
		// and the callback; publish again (deduplicated), then drop the token.
		err = s.announce(ctx, b, prog, m, false)
		sr.Action, sr.Outcome = api.ActionStale, prog.Outcome.String()
		return sr, err
	case prog.Position(tok) == records.TokenBehind:
		err = s.dropStale(ctx, b, prog, m)
		sr.Action = api.ActionStale
		return sr, err
	case prog.Position(tok) == records.TokenAhead:
		// Either an edit is half done (it will catch up) or the record was
		// lost or tampered with: bounded retries, then a visible end.
		cause := fmt.Errorf("processor: token (gen %d, step %d) ahead of its progress record (gen %d, step %d)", tok.Gen, tok.Rotation, prog.Gen, prog.Rotation)
		sr.Action, err = s.poisoned(ctx, b, st, m, cause)
		sr.Outcome = outcomeOf(prog)
		return sr, err
	}
	// A dispatch waiting for inclusion is settled first, expiry or not:
	// the transaction may still land, so its sender stays leased and its
	// hooks run until it is included, failed or past its maximum wait.
	// The batch expires at its next step.
	if prog.State == records.Parked && b.Functions[prog.Parked.Index].Inclusion != nil {
		sr.Action, err = s.inc.await(ctx, b, st, m)
		sr.Outcome = outcomeOf(prog)
		return sr, err
	}
	now := s.opts.Now()
	if b.Expired(now) {
		err = s.finish(ctx, b, st, pipeline.ExpiredOutcome(prog.Next), m)
		sr.Action, sr.Outcome = api.ActionFinished, prog.Outcome.String()
		return sr, err
	}
	if prog.State == records.Parked {
		if now.Before(prog.Parked.Deadline) {
			// Woken early (e.g. redelivered after a crash): wait on.
			err = m.NakWithDelay(prog.Parked.Deadline.Sub(now))
			sr.Action = api.ActionParked
			return sr, err
		}
		idx := prog.Parked.Index
		sr.Action, err = s.functionFailed(ctx, b, st, failure{index: idx, msg: fmt.Sprintf("function %d: no confirmation within %s", idx, b.Functions[idx].Confirm.Timeout), retryable: true, invalidated: true}, m)
		sr.Outcome = outcomeOf(prog)
		return sr, err
	}
	if prog.NotBefore.After(now) {
		err = m.NakWithDelay(prog.NotBefore.Sub(now))
		sr.Action = api.ActionDelayed
		return sr, err
	}
	if b.Scheduled(now) {
		// Its schedule fired early by this clock (clocks differ): never
		// before its run_at.
		err = m.NakWithDelay(b.RunAt.Sub(now))
		sr.Action = api.ActionDelayed
		return sr, err
	}
	if act, done, serr := s.needSender(ctx, b, st, m); done {
		sr.Action, sr.Outcome = act, outcomeOf(prog)
		return sr, serr
	}
	switch {
	case prog.FallbackDue != nil:
		due := prog.FallbackDue
		sr.Action, err = s.settle(ctx, b, st, failure{index: due.Index, msg: due.Reason, exhausted: due.Exhausted}, m)
	case b.Subroutine.Mode == pipeline.Atomic:
		sr.Action, err = s.runAtomic(ctx, b, st, m)
	default:
		sr.Action, err = s.runFunction(ctx, b, st, m)
	}
	if notAttempted(err) {
		sr.Action, err = s.wait(ctx, b, st, m, err)
	}
	sr.Outcome = outcomeOf(prog)
	return sr, err
}

func outcomeOf(prog *records.Progress) string {
	if prog.Outcome == nil {
		return ""
	}
	return prog.Outcome.String()
}

// runAtomic sends all functions to one worker as one unit.
func (s *stepper) runAtomic(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	failures := prog.FailuresOf(0)
	calls := make([]records.WorkCall, len(b.Functions))
	for i, f := range b.Functions {
		calls[i] = records.WorkCall{Index: i, Type: f.Type, Payload: f.Payload}
	}
	rep, err := s.units.run(ctx, &records.WorkRequest{
		BatchID: b.ID, Domain: b.Domain, Key: b.Key, CreatedAt: b.CreatedAt,
		Submitter: b.Submitter, Label: b.Label,
		Attempt: failures + 1, Round: prog.RoundOf(0), Unit: true, Calls: calls,
		Retry: b.Subroutine.Retry, Sender: st.sender,
	})
	if err != nil {
		return "", err
	}
	if err := s.fault.at(faultAfterWork); err != nil {
		return "", err
	}
	if rep.Error == nil {
		st.fresh = rep.Fresh
		prog.Outputs = rep.Outputs
		if err := s.limits.fits(b, prog); err != nil {
			// The unit took effect; its outputs are kept for inspection
			// only, and these do not fit beside the batch.
			s.log.Warn("outputs of an atomic batch left out of its progress", "batch_id", b.ID, "err", err)
			prog.Outputs = nil
		}
		prog.Next = len(b.Functions)
		return api.ActionFinished, s.finish(ctx, b, st, pipeline.ExecutedOutcome(len(b.Functions)), m)
	}
	failures = prog.AddFailure(0)
	setError(prog, rep.Error.Message)
	d := pipeline.Decide(b.RetryFor(0), failures, rep.Error.Retryable, s.opts.Rand)
	if d.Move == pipeline.MoveRetry {
		// The NAK delay is the timer; NotBefore keeps the delay if the token
		// is re-appended meanwhile (an owner's insert).
		prog.NotBefore = s.opts.Now().Add(d.Delay)
		if err := s.save(ctx, st); err != nil {
			return "", err
		}
		if err := s.fault.at(faultAfterProgress); err != nil {
			return "", err
		}
		return api.ActionRetry, m.NakWithDelay(d.Delay)
	}
	return s.settle(ctx, b, st, failure{index: rep.Error.Index, msg: rep.Error.Message, exhausted: d.Exhausted}, m)
}

// runFunction runs the next function of a non-atomic batch.
func (s *stepper) runFunction(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	k := prog.Next
	f := b.Functions[k]
	failures := prog.FailuresOf(k)
	rep, err := s.workers.call(ctx, streams.WorkSubject(f.Type), &records.WorkRequest{
		BatchID: b.ID, Domain: b.Domain, Key: b.Key, CreatedAt: b.CreatedAt,
		Submitter: b.Submitter, Label: b.Label,
		Attempt: failures + 1, Round: prog.RoundOf(k),
		Calls:  []records.WorkCall{{Index: k, Type: f.Type, Payload: f.Payload}},
		Inputs: prog.Outputs, Retry: f.Retry, Sender: st.sender,
	})
	if err != nil {
		return "", err
	}
	if err := s.fault.at(faultAfterWork); err != nil {
		return "", err
	}
	if rep.Error != nil {
		return s.functionFailed(ctx, b, st, failure{index: k, msg: rep.Error.Message, retryable: rep.Error.Retryable}, m)
	}
	st.fresh = rep.Fresh
	out := pipeline.Output{Index: k, Type: f.Type}
	if len(rep.Outputs) > 0 {
		out = rep.Outputs[0]
	}
	return s.advance(ctx, b, st, k, out, m)
}

// advance records that function k took effect with output out. A function
// that needs a confirmation is parked, with its token as the timer of the
// confirmation's timeout; otherwise the batch moves on (keep).
func (s *stepper) advance(ctx context.Context, b *pipeline.Batch, st *state, k int, out pipeline.Output, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	if b.Functions[k].Inclusion != nil {
		return s.inc.park(ctx, b, st, k, out, m)
	}
	if c := b.Functions[k].Confirm; c != nil {
		if err := s.limits.fits(b, prog, out); err != nil {
			return s.tooLarge(ctx, b, st, k, err, m)
		}
		prog.State = records.Parked
		prog.Parked = &records.ParkedFunction{Index: k, Deadline: s.opts.Now().Add(c.Timeout.D()), Output: out}
		if md, err := jsapi.DeliveryOf(m.Reply()); err == nil {
			prog.Parked.Timer = md.StreamSeq
		}
		if err := s.save(ctx, st); err != nil {
			return "", err
		}
		if err := s.fault.at(faultAfterProgress); err != nil {
			return "", err
		}
		return api.ActionParked, m.NakWithDelay(c.Timeout.D())
	}
	return s.keep(ctx, b, st, k, out, m)
}

// keep records that function k took effect with output out, confirmed (or
// needing no confirmation, or handled by its fallback): the batch moves on
// to its next function, or finishes. m is the token, or nil when called
// for a confirmation.
func (s *stepper) keep(ctx context.Context, b *pipeline.Batch, st *state, k int, out pipeline.Output, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	if err := s.limits.fits(b, prog, out); err != nil {
		return s.tooLarge(ctx, b, st, k, err, m)
	}
	prog.State, prog.Parked = records.Queued, nil
	prog.Outputs = append(prog.Outputs, out)
	prog.Next = k + 1
	if prog.Next == len(b.Functions) {
		return api.ActionFinished, s.finish(ctx, b, st, pipeline.ExecutedOutcome(len(b.Functions)), m)
	}
	return api.ActionRotated, s.rotate(ctx, b, st, m)
}

// rotate moves the batch to the back of its queue: progress first, then the
// new token, then the old token's ack once the new one is stored. A crash in between leaves the old
// token, which is then stale and makes sure the new one exists.
func (s *stepper) rotate(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg) error {
	st.Progress.Rotation++
	if err := s.save(ctx, st); err != nil {
		return err
	}
	if err := s.fault.at(faultAfterProgress); err != nil {
		return err
	}
	msg, err := streams.TokenMsg(streams.RequeueSubject(b.Priority, b.Domain), b, st.Progress.Gen, st.Progress.Rotation)
	if err != nil {
		return err
	}
	return s.pub.thenAck(ctx, msg, m, fmt.Sprintf("requeue batch %d", b.ID), faultAfterRequeue)
}

// functionFailed applies the failure chain to a failure of a function of
// a non-atomic batch (or of an atomic batch's confirmation, which atomic
// batches lack). m is the token, or nil when called for a confirmation.
func (s *stepper) functionFailed(ctx context.Context, b *pipeline.Batch, st *state, f failure, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	if f.invalidated {
		prog.NewRound(f.index)
	}
	failures := prog.AddFailure(f.index)
	setError(prog, f.msg)
	prog.State, prog.Parked = records.Queued, nil
	d := pipeline.Decide(b.RetryFor(f.index), failures, f.retryable, s.opts.Rand)
	if d.Move == pipeline.MoveRetry {
		prog.NotBefore = s.opts.Now().Add(d.Delay)
		if m == nil {
			// No token in hand: rotate; the new token waits for NotBefore.
			return api.ActionRetry, s.rotate(ctx, b, st, nil)
		}
		if err := s.save(ctx, st); err != nil {
			return "", err
		}
		if err := s.fault.at(faultAfterProgress); err != nil {
			return "", err
		}
		return api.ActionRetry, m.NakWithDelay(d.Delay)
	}
	f.exhausted = d.Exhausted
	return s.settle(ctx, b, st, f, m)
}

// settle gives the failed function up (an atomic batch: its unit), its
// retries exhausted or its error not retryable: its fallback, if a worker has one,
// decides; without one the batch finishes failed with reason msg. A
// fallback no worker attempted is asked for again later, the failure kept
// in progress (FallbackDue) so the function does not run again meanwhile.
// m is the token, or nil when called for a confirmation.
func (s *stepper) settle(ctx context.Context, b *pipeline.Batch, st *state, f failure, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	idx, msg := f.index, f.msg
	atomic := b.Subroutine.Mode == pipeline.Atomic
	counted := idx
	if atomic {
		counted = 0
	}
	out, err := s.workers.fallback(ctx, b, prog, f, prog.FailuresOf(counted))
	if err == nil && out == nil {
		err = s.inc.failureHook(ctx, b, st, f)
	}
	if notAttempted(err) && !st.noWait {
		if m == nil {
			return "", err // the confirmation is applied again later
		}
		if prog.FallbackDue == nil {
			prog.FallbackDue = &records.DueFallback{Index: idx, Exhausted: f.exhausted, Reason: capMessage(msg)}
			if err := s.save(ctx, st); err != nil {
				return "", err
			}
			if err := s.fault.at(faultAfterProgress); err != nil {
				return "", err
			}
		}
		return s.wait(ctx, b, st, m, err)
	}
	prog.FallbackDue = nil
	switch {
	case notAttempted(err):
		setError(prog, prog.LastError+"; fallback not attempted: "+err.Error())
	case err != nil:
		return "", err
	case out != nil:
		s.opts.Telemetry.FallbackUsed(s.opts.Domain)
		prog.Fallbacks = append(prog.Fallbacks, idx)
		if atomic {
			prog.Next = len(b.Functions)
			return api.ActionFinished, s.finish(ctx, b, st, pipeline.ExecutedOutcome(len(b.Functions)), m)
		}
		return s.keep(ctx, b, st, idx, *out, m)
	}
	prog.FailedIndex = idx
	if atomic {
		return api.ActionFinished, s.finish(ctx, b, st, pipeline.RejectedOutcome(capMessage(msg)), m)
	}
	return api.ActionFinished, s.finish(ctx, b, st, pipeline.FailedAfter(prog.Next, capMessage(msg)), m)
}

// tooLarge ends a non-atomic batch whose function k took effect but whose
// output cannot be kept beside the others: a permanent failure of k,
// without a fallback (its output would not fit either).
func (s *stepper) tooLarge(ctx context.Context, b *pipeline.Batch, st *state, k int, cause error, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	msg := fmt.Sprintf("function %d: %v", k, cause)
	s.log.Error("function output too large to keep: the batch ends", "batch_id", b.ID, "index", k, "err", cause)
	prog.AddFailure(k)
	setError(prog, msg)
	prog.State, prog.Parked, prog.FallbackDue = records.Queued, nil, nil
	prog.FailedIndex = k
	return api.ActionFinished, s.finish(ctx, b, st, pipeline.FailedAfter(prog.Next, prog.LastError), m)
}

// finish makes the batch terminal: progress first, then dead letter and
// callback (both deduplicated), then the token's ack.
func (s *stepper) finish(ctx context.Context, b *pipeline.Batch, st *state, o pipeline.Outcome, m jetstream.Msg) error {
	prog := &st.Progress
	prog.State, prog.Parked, prog.Outcome = records.Done, nil, &o
	// A batch that succeeded at its first step (an atomic batch, or a
	// single function) needs no progress record: if the token comes back,
	// the worker's completion record answers and the callback is
	// deduplicated. One write saved per such batch; failures keep theirs.
	//
	// The skip is safe only if no other processor can have written a
	// record meanwhile. One can hold the same token (a redelivery, or a
	// server that lost its consumer's state) and write a failure or a
	// retry; but only after a failed run of the call, and then this
	// step's call is not fresh. Or it can find the batch expired by its
	// clock: hence the margin. Otherwise the terminal record is written
	// with compare-and-set, so a concurrent writer's record is seen.
	skip := st.Rev == 0 && st.fresh && o.Status == pipeline.Executed && len(prog.Fallbacks) == 0 &&
		(b.ExpiresAt.IsZero() || s.opts.Now().Add(expirySkew).Before(b.ExpiresAt))
	if !skip {
		if err := s.save(ctx, st); err != nil {
			return err
		}
	}
	if err := s.fault.at(faultAfterProgress); err != nil {
		return err
	}
	// Only a step whose call ran fresh reached this outcome first: any
	// other may repeat a finish whose callback is stored already.
	return s.announce(ctx, b, prog, m, st.fresh)
}

// announce publishes the dead letter (for failures) and the terminal
// callback of a Done batch, then acknowledges the token m (if any) once
// the callback is stored (publisher.callbackThenAck). first says this step
// found the outcome (its call ran fresh): its callback may travel in a
// group. Any other (a batch found done, a call answered from its record)
// may repeat a finish whose callback is stored already, and publishes it
// alone, deduplicated by its id, so that a repeated token, such as a queue
// edit's copy, stores no second callback.
func (s *stepper) announce(ctx context.Context, b *pipeline.Batch, prog *records.Progress, m jetstream.Msg, first bool) error {
	var dlSeq uint64
	if status := prog.Outcome.Status; status == pipeline.Rejected || status == pipeline.PartiallyExecuted {
		seq, err := s.pub.deadLetter(ctx, b, prog, m)
		if err != nil {
			return err
		}
		dlSeq = seq
		if err := s.fault.at(faultAfterDeadLetter); err != nil {
			return err
		}
	}
	var trace map[string]string
	if first {
		// It may travel in a group, whose headers are not its own.
		trace = s.opts.Telemetry.InjectMap(ctx)
	}
	cb, err := s.pub.callback(b, prog, dlSeq, trace)
	if err != nil {
		return err
	}
	if err := s.pub.callbackThenAck(ctx, cb, m, fmt.Sprintf("callback of batch %d", b.ID), first); err != nil {
		return err
	}
	s.senders.release(ctx, b)
	s.cache.forget(b.ID)
	// Every outcome is in the batch record and its callback; a log line per
	// executed batch would cost every batch, so only the others are Info.
	level := slog.LevelInfo
	if prog.Outcome.Status == pipeline.Executed {
		level = slog.LevelDebug
	}
	if s.log.Enabled(ctx, level) { // its attributes cost even when the line is dropped
		s.log.Log(ctx, level, "batch finished", "batch_id", b.ID, "outcome", prog.Outcome.String(), "attempts", prog.Attempts(b.Subroutine.Mode == pipeline.Atomic))
	}
	return nil
}

// dropStale acknowledges a token that is behind the progress record, after
// publishing the batch's live token again: a processor may have died between
// writing progress and publishing it. The publish carries the live token's
// deduplication id, so within the duplicate window a token that exists is
// not stored twice; past it, a second copy is harmless (whichever runs
// first makes the other stale, and the worker's claim stops a concurrent
// second run).
func (s *stepper) dropStale(ctx context.Context, b *pipeline.Batch, prog *records.Progress, m jetstream.Msg) error {
	if prog.State != records.Parked { // a parked batch's token is its timer, which exists
		if err := s.pub.token(ctx, b, prog); err != nil {
			return err
		}
	}
	return m.Ack()
}

// crashPoints is Options.fault: called at each crash point of a step.
type crashPoints func(point string) error

// at abandons the step at point (an error matching errCrash) when the hook
// says so; without a hook it does nothing.
func (f crashPoints) at(point string) error {
	if f == nil {
		return nil
	}
	if err := f(point); err != nil {
		return fmt.Errorf("%w at %s: %w", errCrash, point, err)
	}
	return nil
}

// load reads the batch's progress (streams.ProgressStore.Load): a batch
// never stepped starts queued; a record that does not decode comes back as
// an error together with a state holding its revision, so that it can be
// overwritten.
func (s *stepper) load(ctx context.Context, id uint64) (*state, error) {
	e, err := s.store.Load(ctx, s.opts.Domain, id)
	if e == nil {
		return nil, err
	}
	return &state{ProgressEntry: *e}, err
}

// save writes the progress record with compare-and-set on the revision
// read; a lost race matches streams.ErrConflict.
func (s *stepper) save(ctx context.Context, st *state) error {
	st.By = s.opts.Name
	if !st.waiting {
		st.Waiting = nil
	}
	return s.store.Save(ctx, s.opts.Domain, &st.ProgressEntry)
}
