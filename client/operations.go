package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
)

// Send submits a batch under a label the user may submit under. With an
// IdempotencyKey it is safe to retry: a repeat of the same submission
// returns the same batch with Duplicate set, and queues nothing.
// Errors: ErrInvalid (no label or no functions), ErrNotFound (unknown
// label), ErrForbidden, ErrBadRequest, ErrConflict.
func (c *Client) Send(ctx context.Context, req api.SendRequest) (*api.SendReply, error) {
	if req.Label == "" {
		return nil, invalid(api.OpSend, "label is empty; expected the label to submit under")
	}
	if err := checkCalls(api.OpSend, req.Functions); err != nil {
		return nil, err
	}
	if c.groups.max > 0 && plainSend(&req) {
		return c.sendPlain(ctx, req)
	}
	return c.sendNow(ctx, &req)
}

// SendMany submits up to api.MaxSendMany batches in one request: each as
// Send would, in the order given, so batches of one key join its order as
// listed (plain batches listed together, with no key, idempotency key or
// schedule, are written together). The reply has one result per batch, in
// order; a batch refused for what it asks does not stop the others
// (ResultError says why it was refused), and a failure inside authz stops
// the request, answering the batches not yet started 503, not submitted.
// The request counts as one send per batch against the caller's send
// rate, all or none.
//
// When SendMany returns an error, nothing is known of the batches: the
// request may have been refused whole (ErrTooManyRequests, ErrBadRequest:
// nothing was submitted) or its reply lost after some were queued
// (ErrNoAnswer). With an IdempotencyKey on each batch the same request is
// safe to send again: a batch already queued comes back as a duplicate.
// Errors: ErrInvalid (no batches, too many, or a batch with no label or no
// functions, named by its index), ErrBadRequest, ErrTooManyRequests.
func (c *Client) SendMany(ctx context.Context, req api.SendManyRequest) (*api.SendManyReply, error) {
	if n := len(req.Batches); n == 0 || n > api.MaxSendMany {
		return nil, invalid(api.OpSendMany, fmt.Sprintf("%d batches; expected 1 to %d", n, api.MaxSendMany))
	}
	for i, b := range req.Batches {
		if b.Label == "" {
			return nil, invalid(api.OpSendMany, fmt.Sprintf("batches[%d]: label is empty; expected the label to submit under", i))
		}
		if checkCalls(api.OpSendMany, b.Functions) != nil {
			// Again, naming the batch: formatted only for the one refused.
			return nil, checkCalls(fmt.Sprintf("%s: batches[%d]", api.OpSendMany, i), b.Functions)
		}
	}
	data, err := encodeSendMany(&req)
	if err != nil {
		return nil, fmt.Errorf("client: %s: encode request: %w", api.OpSendMany, err)
	}
	rep, err := callRaw[api.SendManyReply](ctx, c, api.OpSendMany, data)
	if err != nil {
		return nil, err
	}
	if len(rep.Results) != len(req.Batches) {
		return nil, fmt.Errorf("client: %s: %d results for %d batches", api.OpSendMany, len(rep.Results), len(req.Batches))
	}
	return rep, nil
}

// ResultError is why a batch of a SendMany was not queued, as the error
// Send would have returned for it (errors.Is matches the same sentinels);
// nil when it was queued.
func ResultError(r *api.SendManyResult) error {
	if !r.Failed() {
		return nil
	}
	return &Error{Op: api.OpSendMany, Code: r.Code, Message: r.Error}
}

// Batch returns a batch's record and, while it runs, its progress. Only
// the owner and the batch's submitter may read it; anyone else gets
// ErrNotFound, as for a batch that does not exist.
func (c *Client) Batch(ctx context.Context, req api.IDRequest) (*api.BatchReply, error) {
	if req.ID == 0 {
		return nil, invalid(api.OpBatch, "id is 0; expected a batch id (from 1)")
	}
	return call[api.BatchReply](ctx, c, api.OpBatch, req)
}

// Confirm confirms function Index of batch ID, which waits for a
// confirmation, as the user. Errors: ErrNotFound (no such batch waiting
// for the user), ErrBadRequest, ErrForbidden, ErrConflict (finished).
func (c *Client) Confirm(ctx context.Context, req api.ConfirmRequest) (*api.ConfirmReply, error) {
	if req.ID == 0 {
		return nil, invalid(api.OpConfirm, "id is 0; expected a batch id (from 1)")
	}
	if req.Index < 0 {
		return nil, invalid(api.OpConfirm, fmt.Sprintf("index is %d; expected a function's index (from 0)", req.Index))
	}
	return call[api.ConfirmReply](ctx, c, api.OpConfirm, req)
}

// Queue lists positions [From, To) of a domain's queue of one priority (To
// 0: to the end). Owner only (ErrForbidden); ErrOutOfBounds past the end.
func (c *Client) Queue(ctx context.Context, req api.QueueRequest) (*api.QueueReply, error) {
	if err := checkQueue(api.OpQueue, req.Domain, req.Priority); err != nil {
		return nil, err
	}
	if req.From < 0 || req.To < 0 || (req.To != 0 && req.To < req.From) {
		return nil, invalid(api.OpQueue, fmt.Sprintf("range [%d, %d); expected 0 <= from <= to, or to 0 for the end", req.From, req.To))
	}
	return call[api.QueueReply](ctx, c, api.OpQueue, req)
}

// Pause pauses a domain's processors. Owner only (ErrForbidden).
func (c *Client) Pause(ctx context.Context, req api.DomainRequest) (*api.StateReply, error) {
	if err := checkDomain(api.OpPause, req.Domain); err != nil {
		return nil, err
	}
	return call[api.StateReply](ctx, c, api.OpPause, req)
}

// Resume resumes a domain's processors. Owner only (ErrForbidden).
func (c *Client) Resume(ctx context.Context, req api.DomainRequest) (*api.StateReply, error) {
	if err := checkDomain(api.OpResume, req.Domain); err != nil {
		return nil, err
	}
	return call[api.StateReply](ctx, c, api.OpResume, req)
}

// Evict removes the batch at a position of a queue; it finishes as
// RemovedByOwner. Owner only (ErrForbidden); ErrOutOfBounds past the end,
// ErrConflict when the batch finished first. Not safe to retry: a repeat
// evicts whatever is at the position then.
func (c *Client) Evict(ctx context.Context, req api.PositionRequest) (*api.EvictReply, error) {
	if err := checkQueue(api.OpEvict, req.Domain, req.Priority); err != nil {
		return nil, err
	}
	if req.Position < 0 {
		return nil, invalid(api.OpEvict, fmt.Sprintf("position is %d; expected a position (from 0)", req.Position))
	}
	return call[api.EvictReply](ctx, c, api.OpEvict, req)
}

// Insert inserts a new batch at a position of a queue, under a label of
// that domain, past the label's concurrency limit. Owner only
// (ErrForbidden); ErrOutOfBounds past the end, ErrConflict while another
// edit runs. Not safe to retry: a repeat inserts another batch.
func (c *Client) Insert(ctx context.Context, req api.InsertRequest) (*api.InsertReply, error) {
	if err := checkQueue(api.OpInsert, req.Domain, req.Priority); err != nil {
		return nil, err
	}
	if req.Position < 0 {
		return nil, invalid(api.OpInsert, fmt.Sprintf("position is %d; expected a position (from 0)", req.Position))
	}
	if req.Label == "" {
		return nil, invalid(api.OpInsert, "label is empty; expected the label whose settings the batch runs with")
	}
	if err := checkCalls(api.OpInsert, req.Functions); err != nil {
		return nil, err
	}
	return call[api.InsertReply](ctx, c, api.OpInsert, req)
}

// DLQ lists dead letters, of one domain when Domain is set, from sequence
// From on, at most Limit (api.DefaultDLQLimit when 0). Owner only
// (ErrForbidden).
func (c *Client) DLQ(ctx context.Context, req api.DLQRequest) (*api.DLQReply, error) {
	if req.Domain != "" {
		if err := checkDomain(api.OpDLQ, req.Domain); err != nil {
			return nil, err
		}
	}
	if req.Limit < 0 {
		return nil, invalid(api.OpDLQ, fmt.Sprintf("limit is %d; expected 1 to %d, or 0 for %d", req.Limit, api.MaxDLQLimit, api.DefaultDLQLimit))
	}
	return call[api.DLQReply](ctx, c, api.OpDLQ, req)
}

// Replay queues dead letters again as new batches: the one at Seq, or
// every one of Domain (all domains when empty) not replayed yet when All is
// set. Replaying a dead letter again returns the same new batch. Owner only
// (ErrForbidden); ErrNotFound for no dead letter at Seq.
func (c *Client) Replay(ctx context.Context, req api.ReplayRequest) (*api.ReplayReply, error) {
	switch {
	case req.Seq == 0 && !req.All:
		return nil, invalid(api.OpReplay, "nothing named; expected a dead letter's seq, or all (with a domain or none)")
	case req.Seq != 0 && (req.All || req.Domain != ""):
		return nil, invalid(api.OpReplay, "both a seq and all or a domain; expected one dead letter's seq, or all")
	case req.Domain != "":
		if err := checkDomain(api.OpReplay, req.Domain); err != nil {
			return nil, err
		}
	}
	return call[api.ReplayReply](ctx, c, api.OpReplay, req)
}

// Purge removes dead letters for good: the one at Seq; every one of
// Domain (all domains when empty) with All; or, with OlderThan, those of
// Domain (or all domains) dead-lettered longer ago than that. It says how
// many went. Owner only (ErrForbidden); ErrNotFound for no dead letter at
// Seq.
func (c *Client) Purge(ctx context.Context, req api.PurgeRequest) (*api.PurgeReply, error) {
	named := 0
	for _, set := range []bool{req.Seq != 0, req.All, req.OlderThan != 0} {
		if set {
			named++
		}
	}
	switch {
	case named == 0:
		return nil, invalid(api.OpPurge, "nothing named; expected a dead letter's seq, all, or older_than (the last two with a domain or none)")
	case named > 1:
		return nil, invalid(api.OpPurge, "more than one of seq, all and older_than; expected one")
	case req.Seq != 0 && req.Domain != "":
		return nil, invalid(api.OpPurge, "both a seq and a domain; a seq names one dead letter")
	case req.OlderThan < 0:
		return nil, invalid(api.OpPurge, fmt.Sprintf("older_than is %s; expected a positive duration", req.OlderThan))
	case req.Domain != "":
		if err := checkDomain(api.OpPurge, req.Domain); err != nil {
			return nil, err
		}
	}
	return call[api.PurgeReply](ctx, c, api.OpPurge, req)
}

// Reload makes authz read its authorization table file again; a table that
// does not validate is refused (ErrBadRequest) and the old one stays. Owner
// only (ErrForbidden). Each replica reloads its own: with several, the one
// that answers.
func (c *Client) Reload(ctx context.Context) (*api.ReloadReply, error) {
	return call[api.ReloadReply](ctx, c, api.OpReload, struct{}{})
}

// Keys lists the keys of a domain with a batch waiting, in byte order:
// each key's running batch (its head), the head's state in the
// sequencer's words and tickflow's, since when, and how many batches wait
// behind it. At most Limit keys (api.DefaultKeysLimit when 0, at most
// api.MaxKeysLimit); with More set, ask again with After set to the last key. Owner
// only (ErrForbidden).
func (c *Client) Keys(ctx context.Context, req api.KeysRequest) (*api.KeysReply, error) {
	if err := checkDomain(api.OpKeys, req.Domain); err != nil {
		return nil, err
	}
	if req.Limit < 0 || req.Limit > api.MaxKeysLimit {
		return nil, invalid(api.OpKeys, fmt.Sprintf("limit is %d; expected 1 to %d, or 0 for the default", req.Limit, api.MaxKeysLimit))
	}
	return call[api.KeysReply](ctx, c, api.OpKeys, req)
}

func call[Reply any](ctx context.Context, c *Client, op string, req any) (*Reply, error) {
	data, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s: encode request: %w", op, err)
	}
	return callRaw[Reply](ctx, c, op, data)
}

// callRaw is call for a request already encoded.
func callRaw[Reply any](ctx context.Context, c *Client, op string, data []byte) (*Reply, error) {
	var out Reply
	if err := c.do(ctx, op, data, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func invalid(op, what string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, op, what)
}

func checkDomain(op, domain string) error {
	if err := pipeline.ValidateDomain(domain); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, op, err)
	}
	return nil
}

func checkQueue(op, domain string, p pipeline.Priority) error {
	if err := checkDomain(op, domain); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalid, op, err)
	}
	return nil
}

func checkCalls(op string, calls api.Calls) error {
	if len(calls) == 0 {
		return invalid(op, "no functions; expected at least one")
	}
	for i, f := range calls {
		if err := pipeline.ValidateType(f.Type); err != nil {
			return fmt.Errorf("%w: %s: functions[%d]: %w", ErrInvalid, op, i, err)
		}
	}
	return nil
}
