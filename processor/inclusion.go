package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/senderlease"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// A function with pipeline.Inclusion parks after its handler succeeded,
// as a confirmed function does, with its output (and the dispatch
// reference in it) kept in the progress record and its token as the timer:
// the token comes back every Inclusion.PollEvery (or at the deadline) and
// asks the worker's Poller; an outside confirmation, through authz, may
// settle it first, but only one that names the parked dispatch (its Ref):
// a late confirmation of an earlier round's dispatch is dropped.
// Included: that is saved first (ParkedFunction.Included), then the success
// hook is called, then the batch moves on; a crash, or a hook no worker
// attempted, in between finds the saved state and calls the hook again,
// answered once by the worker's record. So the hook runs only for a dispatch
// whose inclusion is durable, and an included function can no longer fail.
// Failed, or not included by the deadline: a failure of the function that
// invalidates the dispatch (a new round), retried under its retry logic
// with the next attempt; exhausted, the failure hook and a terminal failure.
//
// Everything the wait needs is in the progress record and the token, so a
// processor that starts after another died finds the token and polls on:
// the function is never dispatched again while its dispatch may still be
// included, and a dispatch whose progress write was lost is answered from
// the worker's completion record.

// inclusions waits for the dispatches of functions with
// pipeline.Inclusion: it parks them, polls, calls their hooks and applies
// the outside confirmations of their inclusion, through the steps' writes
// (stepper).
type inclusions struct {
	steps   *stepper
	workers *workClient
	senders *senderPool
	limits  recordLimits
	now     func() time.Time
	rand    func() float64 // jitter, Options.Rand
	log     *slog.Logger
}

// park parks function k, which dispatched out, until it is
// included, failed, or Inclusion.MaxWait passed.
func (iw *inclusions) park(ctx context.Context, b *pipeline.Batch, st *state, k int, out pipeline.Output, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	inc := b.Functions[k].Inclusion
	if err := iw.limits.fits(b, prog, out); err != nil {
		return iw.steps.tooLarge(ctx, b, st, k, err, m)
	}
	now := iw.now()
	prog.State = records.Parked
	prog.Parked = &records.ParkedFunction{Index: k, Deadline: now.Add(inc.MaxWait.D()), Output: out}
	if md, err := jsapi.DeliveryOf(m.Reply()); err == nil {
		prog.Parked.Timer = md.StreamSeq
	}
	if err := iw.steps.save(ctx, st); err != nil {
		return "", err
	}
	if err := iw.steps.fault.at(faultAfterProgress); err != nil {
		return "", err
	}
	return api.ActionParked, m.NakWithDelay(pollDelay(inc, prog.Parked.Deadline, now))
}

// pollDelay is how long a parked function's token waits before it comes
// back: the poll interval, or the time left when that is shorter.
func pollDelay(inc *pipeline.Inclusion, deadline, now time.Time) time.Duration {
	d := deadline.Sub(now)
	if inc.PollEvery > 0 && inc.PollEvery.D() < d {
		d = inc.PollEvery.D()
	}
	return max(d, time.Millisecond)
}

// await handles the token of a function waiting for inclusion:
// it polls (when the function polls), then waits on, or fails the function
// once the deadline passed.
func (iw *inclusions) await(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	k := prog.Parked.Index
	f := b.Functions[k]
	inc := f.Inclusion
	if prog.Parked.Included {
		// Included already, its hook or the move on interrupted: finish
		// that, whatever the deadline says.
		if err := iw.leaseFor(ctx, b, st); err != nil {
			return "", err
		}
		return iw.included(ctx, b, st, m)
	}
	if inc.PollEvery > 0 {
		if err := iw.leaseFor(ctx, b, st); err != nil {
			return "", err
		}
		rep, err := iw.workers.call(ctx, streams.PollSubject(f.Type), iw.request(b, st, k, &records.InclusionCall{Ref: prog.Parked.Output.Ref}))
		switch {
		case notAttempted(err):
			iw.log.Debug("inclusion poll not attempted", "batch_id", b.ID, "index", k, "err", err)
		case err != nil:
			return "", err
		case rep.Included:
			return iw.included(ctx, b, st, m)
		case rep.Error != nil && !rep.Error.NoHook:
			return iw.notIncluded(ctx, b, st, fmt.Sprintf("function %d: dispatch %q failed: %s", k, logging.Capped(prog.Parked.Output.Ref), rep.Error.Message), rep.Error.Retryable, m)
		}
	}
	now := iw.now()
	if now.Before(prog.Parked.Deadline) {
		return api.ActionParked, m.NakWithDelay(pollDelay(inc, prog.Parked.Deadline, now))
	}
	return iw.notIncluded(ctx, b, st, fmt.Sprintf("function %d: dispatch %q not included within %s", k, logging.Capped(prog.Parked.Output.Ref), inc.MaxWait), true, m)
}

// request is a poll or hook request about function k.
func (iw *inclusions) request(b *pipeline.Batch, st *state, k int, ic *records.InclusionCall) *records.WorkRequest {
	prog := &st.Progress
	f := b.Functions[k]
	return &records.WorkRequest{
		BatchID: b.ID, Domain: b.Domain, Key: b.Key, CreatedAt: b.CreatedAt,
		Submitter: b.Submitter, Label: b.Label,
		Attempt: prog.FailuresOf(k) + 1, Round: prog.RoundOf(k),
		Calls:  []records.WorkCall{{Index: k, Type: f.Type, Payload: f.Payload}},
		Inputs: prog.Outputs, Retry: f.Retry, Sender: st.sender, Inclusion: ic,
	}
}

// leaseFor gives st the sender batch b holds, for a poll or hook request.
func (iw *inclusions) leaseFor(ctx context.Context, b *pipeline.Batch, st *state) error {
	sender, _, err := iw.senders.lease(ctx, b)
	if err != nil && !errors.Is(err, senderlease.ErrNoSender) {
		return err
	}
	st.sender = sender
	return nil
}

// included settles a parked function whose dispatch was included: the
// inclusion is saved first, so that nothing can fail the function any
// more (a concurrent failed confirmation, or authz, loses that race, and
// then no hook ran), then its success hook is called (once per function:
// the worker records it), then the batch moves on. m is the token, or nil
// for an outside confirmation.
func (iw *inclusions) included(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg) (api.Action, error) {
	prog := &st.Progress
	k, out := prog.Parked.Index, prog.Parked.Output
	if !prog.Parked.Included {
		prog.Parked.Included = true
		if err := iw.steps.save(ctx, st); err != nil {
			return "", err
		}
		if err := iw.steps.fault.at(faultAfterProgress); err != nil {
			return "", err
		}
	}
	rep, err := iw.workers.call(ctx, streams.HookSubject(b.Functions[k].Type), iw.request(b, st, k, &records.InclusionCall{Ref: out.Ref, Hook: records.HookSuccess, Output: &out}))
	if notAttempted(err) && m != nil {
		// Still parked, included: the token's next return calls it again.
		iw.log.Debug("success hook not attempted; asked again later", "batch_id", b.ID, "index", k, "err", err)
		return api.ActionBusy, m.NakWithDelay(backoff(1, waitBase, waitCeiling, iw.rand))
	}
	if err != nil {
		return "", err
	}
	if rep.Error != nil && !rep.Error.NoHook {
		iw.log.Warn("success hook refused", "batch_id", b.ID, "index", k, "err", rep.Error.Message)
	}
	return iw.steps.keep(ctx, b, st, k, out, m)
}

// notIncluded fails a parked function whose dispatch failed or was not
// included in time: its effect no longer counts, so a retry dispatches anew.
func (iw *inclusions) notIncluded(ctx context.Context, b *pipeline.Batch, st *state, msg string, retryable bool, m jetstream.Msg) (api.Action, error) {
	return iw.steps.functionFailed(ctx, b, st, failure{index: st.Progress.Parked.Index, msg: msg, retryable: retryable, invalidated: true}, m)
}

// failureHook calls the failure hook of a function waiting for inclusion
// that is given up on, once; nil for any other function, for a handler
// without the hook and once it ran. An error that notAttempted recognises
// means ask again later.
func (iw *inclusions) failureHook(ctx context.Context, b *pipeline.Batch, st *state, f failure) error {
	if b.Subroutine.Mode == pipeline.Atomic || f.index < 0 || f.index >= len(b.Functions) || b.Functions[f.index].Inclusion == nil {
		return nil
	}
	prog := &st.Progress
	req := iw.request(b, st, f.index, &records.InclusionCall{Hook: records.HookFailure})
	req.Failure = &pipeline.Failure{
		BatchID: b.ID, Index: f.index, Key: b.Key, CreatedAt: b.CreatedAt,
		Failures: prog.FailuresOf(f.index), LastError: prog.LastError, Exhausted: f.exhausted,
	}
	rep, err := iw.workers.call(ctx, streams.HookSubject(b.Functions[f.index].Type), req)
	if err != nil {
		return err
	}
	if rep.Error != nil && !rep.Error.NoHook {
		iw.log.Warn("failure hook refused", "batch_id", b.ID, "index", f.index, "err", rep.Error.Message)
	}
	return nil
}

// confirm applies an outside confirmation of a function waiting
// for inclusion: pipeline.ConfirmIncluded, or pipeline.ConfirmFailed with
// an optional ": reason", about the parked dispatch (conf.Ref). One about
// another dispatch (an earlier round's, arriving late) is dropped, and so
// is a failure of a dispatch whose inclusion was saved already. The
// caller retires the timer token once it is applied.
func (iw *inclusions) confirm(ctx context.Context, b *pipeline.Batch, st *state, index int, conf records.Confirmation) error {
	inc := b.Functions[index].Inclusion
	if len(inc.By) > 0 && !slices.Contains(inc.By, conf.By) {
		return fmt.Errorf("%w: %q may not confirm the inclusion of function %d of batch %d (allowed: %v)", errDropConfirmation, conf.By, index, b.ID, inc.By)
	}
	parked := st.Progress.Parked
	if err := dispatchMatches(b, &st.Progress, index, conf.Ref); err != nil {
		return err
	}
	failed := conf.Content == pipeline.ConfirmFailed || strings.HasPrefix(conf.Content, pipeline.ConfirmFailed+":")
	if failed && parked.Included {
		return fmt.Errorf("%w: function %d of batch %d: dispatch %q was included already; its failure confirmed by %s comes too late", errDropConfirmation, index, b.ID, logging.Capped(parked.Output.Ref), conf.By)
	}
	if err := iw.leaseFor(ctx, b, st); err != nil {
		return err
	}
	var err error
	switch {
	case conf.Content == pipeline.ConfirmIncluded:
		_, err = iw.included(ctx, b, st, nil)
	case failed:
		_, err = iw.notIncluded(ctx, b, st, fmt.Sprintf("function %d: dispatch %q failed (confirmed by %s): %s", index, logging.Capped(parked.Output.Ref), conf.By, logging.Capped(conf.Content)), true, nil)
	default:
		return fmt.Errorf("%w: inclusion of function %d of batch %d confirmed with %q: expected %q or %q", errDropConfirmation, index, b.ID, logging.Capped(conf.Content), pipeline.ConfirmIncluded, pipeline.ConfirmFailed)
	}
	return err
}

// dispatchMatches says whether a confirmation about dispatch ref may settle
// function index of b, parked in prog: only the dispatch parked there (its
// Result.Ref, one per round), so that a late confirmation of an earlier
// round's dispatch cannot fail, or include, a later one.
func dispatchMatches(b *pipeline.Batch, prog *records.Progress, index int, ref string) error {
	if want := prog.Parked.Output.Ref; ref != want {
		return fmt.Errorf("%w: confirmation of dispatch %q for function %d of batch %d, which waits for dispatch %q (round %d)", errDropConfirmation, logging.Capped(ref), index, b.ID, logging.Capped(want), prog.RoundOf(index))
	}
	return nil
}
