package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/senderlease"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// A batch that needs a sender holds one of its domain's pool until it is
// terminal (senderlease.Acquire), so a label that leases a sender bounds
// its batches' size (Label.MaxFunctions) and the processor keeps each
// submitter to its share of the pool. Every terminal outcome reaches authz as
// a callback (the owner's evict publishes one too), and Apply releases the
// sender there before the callback is acknowledged, so a release that
// failed is done again with the redelivered callback.

// senderPool keeps the domains' sender pools: it frees a finished batch's
// sender, lists them, and checks a confirmation of an inclusion wait.
type senderPool struct {
	senders  jetstream.KeyValue
	progress *streams.ProgressStore
	now      func() time.Time
	log      *slog.Logger
}

// release frees the sender batch id of domain holds, if any. It is
// idempotent.
func (sp *senderPool) release(ctx context.Context, domain string, id uint64) error {
	name, err := senderlease.Release(ctx, sp.senders, domain, id, sp.now())
	if err != nil {
		return fmt.Errorf("authz: release the sender of batch %d: %w", id, err)
	}
	if name != "" {
		sp.log.Debug("sender released", "batch_id", id, "domain", domain, "sender", name)
	}
	return nil
}

// list answers the owner's senders request.
func (sp *senderPool) list(ctx context.Context, _ string, req *api.SendersRequest) (any, error) {
	if err := pipeline.ValidateDomain(req.Domain); err != nil {
		return nil, err
	}
	pool, err := senderlease.Load(ctx, sp.senders, req.Domain)
	if err != nil {
		return nil, err
	}
	now := sp.now()
	out := &api.SendersReply{Domain: req.Domain, Senders: make([]api.SenderState, 0, len(pool.Senders))}
	for _, snd := range pool.Senders {
		st := api.SenderState{Name: snd.Name, State: api.SenderFree, Since: snd.Since, For: pipeline.Duration(now.Sub(snd.Since).Round(time.Millisecond))}
		if !snd.Free() {
			st.State, st.Key, st.Batch, st.Processor, st.Submitter = api.SenderLeased, snd.Holder(), snd.Batch, snd.Processor, snd.Submitter
		}
		out.Senders = append(out.Senders, st)
	}
	return out, nil
}

// confirmRule is the confirmation rule of function f as the confirm
// operation applies it: its Confirm, or for a function waiting for
// inclusion, who may confirm that; nil for a function that takes none.
func confirmRule(f *pipeline.Function) *pipeline.Confirmation {
	if f.Inclusion != nil {
		return &pipeline.Confirmation{By: f.Inclusion.By}
	}
	return f.Confirm
}

// validateInclusion checks the rule's inclusion against the label's mode.
func (r *FunctionRule) validateInclusion(mode pipeline.Mode) error {
	switch inc := r.Inclusion; {
	case inc == nil:
		return nil
	case mode == pipeline.Atomic:
		return errors.New("not allowed in an atomic label: inclusion waits between functions")
	case r.Confirm != nil:
		return errors.New("not allowed together with confirm: an inclusion is confirmed itself")
	case inc.MaxWait <= 0:
		return fmt.Errorf("max_wait must be a positive duration (got %s)", inc.MaxWait)
	case inc.PollEvery < 0:
		return fmt.Errorf("poll_every must not be negative (got %s)", inc.PollEvery)
	}
	return nil
}

// A function waiting for inclusion has dispatched something (a
// transaction, signed by the batch's sender) that may still be included.
// Ending its batch from outside (cancel, the owner's evict) while it waits
// would free the sender with the dispatch in flight: the next batch would
// sign with the same sender (the same nonce) and the function's failure
// hook would never run. So both are refused while the batch is parked for
// inclusion, with a 409 that says until when the wait lasts at most; once
// the dispatch is resolved (included, failed, or past max_wait) the batch
// can be ended again, for example while it waits for its retry.

// refuseInclusionWait returns a conflict while batch b, whose progress is
// prog, waits for the inclusion of what one of its functions dispatched;
// what names the refused operation.
func refuseInclusionWait(b *pipeline.Batch, prog *records.Progress, what string) error {
	if prog.State != records.Parked || prog.Parked == nil {
		return nil
	}
	k := prog.Parked.Index
	if k < 0 || k >= len(b.Functions) || b.Functions[k].Inclusion == nil {
		return nil
	}
	return errf(api.CodeConflict, "authz: batch %d cannot be %s now: function %d waits for the inclusion of what it dispatched (until %s at the latest), and its sender stays bound until then; try again once the wait is over",
		b.ID, what, k, prog.Parked.Deadline.UTC().Format(time.RFC3339))
}

// checkInclusionConfirm refuses, when authz can tell from the progress
// record, a confirmation of function req.Index of b, which waits for
// inclusion, that the processor would drop: one about another dispatch
// than the parked one (req.Ref against its Result.Ref), one while no
// dispatch of it is parked, and a failure of a dispatch already included.
// Other functions' confirmations pass unchecked.
func (sp *senderPool) checkInclusionConfirm(ctx context.Context, b *pipeline.Batch, req *api.ConfirmRequest) error {
	if b.Functions[req.Index].Inclusion == nil {
		return nil
	}
	prog, err := sp.progress.Load(ctx, b.Domain, b.ID)
	if err != nil {
		return nil // the processor decides; authz cannot tell
	}
	switch {
	case prog.State != records.Parked || prog.Parked == nil || prog.Parked.Index != req.Index:
		return errf(api.CodeConflict, "authz: function %d of batch %d waits for no inclusion now (state %s)", req.Index, b.ID, prog.State)
	case prog.Parked.Output.Ref != req.Ref:
		return errf(api.CodeConflict, "authz: function %d of batch %d waits for the inclusion of another dispatch than %q (round %d)", req.Index, b.ID, logging.Capped(req.Ref), prog.RoundOf(req.Index))
	case prog.Parked.Included && req.Content != pipeline.ConfirmIncluded:
		return errf(api.CodeConflict, "authz: the dispatch %q of function %d of batch %d was included already", logging.Capped(req.Ref), req.Index, b.ID)
	}
	return nil
}
