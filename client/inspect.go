package client

import (
	"context"
	"fmt"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
)

// Domains returns every domain of the authorization table with its queue
// depth per priority, its dead letters and its pause state. Owner only
// (ErrForbidden).
func (c *Client) Domains(ctx context.Context) (*api.DomainsReply, error) {
	return call[api.DomainsReply](ctx, c, api.OpDomains, struct{}{})
}

// Presence lists the running processors (name, domains, since) and workers
// (name, function types, since), from the records they refresh while they
// run, and says which labels' domains and function types nothing running
// serves. Owner only (ErrForbidden).
func (c *Client) Presence(ctx context.Context) (*api.PresenceReply, error) {
	return call[api.PresenceReply](ctx, c, api.OpPresence, struct{}{})
}

// InFlight lists a domain's unfinished batches, oldest first: where each
// stands, its attempts, and the processor that moved it last and when.
// Limit 0 means api.DefaultInFlight. The reply's More says there are
// batches beyond its Items. By default authz reads each queue only until
// it has Limit+1 of its batches, so the cost follows Limit, not the queues'
// depth, and the items are the oldest of those at the queues' fronts; set
// Total for the reply's Total (a count of them all) and the oldest of them
// all, at the cost of reading both queues to their end. Owner only
// (ErrForbidden).
func (c *Client) InFlight(ctx context.Context, req api.InFlightRequest) (*api.InFlightReply, error) {
	if err := checkDomain(api.OpInFlight, req.Domain); err != nil {
		return nil, err
	}
	if req.Limit < 0 || req.Limit > api.MaxInFlight {
		return nil, invalid(api.OpInFlight, fmt.Sprintf("limit is %d; expected 1 to %d, or 0 for %d", req.Limit, api.MaxInFlight, api.DefaultInFlight))
	}
	return call[api.InFlightReply](ctx, c, api.OpInFlight, req)
}

// List returns a page of the user's own batches, newest first, of one
// status when Status is set; pass the reply's Next as the next request's
// Before, until it is 0. Only the owner may name another Submitter
// (ErrForbidden).
func (c *Client) List(ctx context.Context, req api.ListRequest) (*api.ListReply, error) {
	if req.Limit < 0 || req.Limit > api.MaxListLimit {
		return nil, invalid(api.OpList, fmt.Sprintf("limit is %d; expected 1 to %d, or 0 for %d", req.Limit, api.MaxListLimit, api.DefaultListLimit))
	}
	if req.Submitter != "" {
		if err := pipeline.ValidateDomain(req.Submitter); err != nil {
			return nil, invalid(api.OpList, fmt.Sprintf("submitter: %v", err))
		}
	}
	return call[api.ListReply](ctx, c, api.OpList, req)
}

// Cancel finishes one of the user's own batches as RemovedByOwner,
// wherever it stands, as the owner's Evict does. ErrNotFound for a batch
// that is not the user's (the owner may cancel any), ErrConflict for one
// that finished first. Safe to retry: a repeat answers as the first did,
// and finishes a cancel cut short.
func (c *Client) Cancel(ctx context.Context, req api.IDRequest) (*api.CancelReply, error) {
	if req.ID == 0 {
		return nil, invalid(api.OpCancel, "id is 0; expected a batch id (from 1)")
	}
	return call[api.CancelReply](ctx, c, api.OpCancel, req)
}
