package client

import (
	"context"
	"fmt"

	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/pipeline"
)

// Domains returns every domain of the authorization table with its queue
// depth per priority, its dead letters and its pause state. Owner only
// (ErrForbidden).
func (c *Client) Domains(ctx context.Context) (*authz.DomainsReply, error) {
	return call[authz.DomainsReply](ctx, c, "domains", struct{}{})
}

// Presence lists the running processors (name, domains, since) and workers
// (name, function types, since), from the records they refresh while they
// run, and says which labels' domains and function types nothing running
// serves. Owner only (ErrForbidden).
func (c *Client) Presence(ctx context.Context) (*authz.PresenceReply, error) {
	return call[authz.PresenceReply](ctx, c, "presence", struct{}{})
}

// InFlight lists a domain's unfinished batches, oldest first: where each
// stands, its attempts, and the processor that moved it last and when.
// Limit 0 means authz.DefaultInFlight. The reply's More says there are
// batches beyond its Items. By default authz reads each queue only until
// it has Limit+1 of its batches, so the cost follows Limit, not the queues'
// depth, and the items are the oldest of those at the queues' fronts; set
// Total for the reply's Total (a count of them all) and the oldest of them
// all, at the cost of reading both queues to their end. Owner only
// (ErrForbidden).
func (c *Client) InFlight(ctx context.Context, req authz.InFlightRequest) (*authz.InFlightReply, error) {
	if err := checkDomain("inflight", req.Domain); err != nil {
		return nil, err
	}
	if req.Limit < 0 || req.Limit > authz.MaxInFlight {
		return nil, invalid("inflight", fmt.Sprintf("limit is %d; expected 1 to %d, or 0 for %d", req.Limit, authz.MaxInFlight, authz.DefaultInFlight))
	}
	return call[authz.InFlightReply](ctx, c, "inflight", req)
}

// List returns a page of the user's own batches, newest first, of one
// status when Status is set; pass the reply's Next as the next request's
// Before, until it is 0. Only the owner may name another Submitter
// (ErrForbidden).
func (c *Client) List(ctx context.Context, req authz.ListRequest) (*authz.ListReply, error) {
	if req.Limit < 0 || req.Limit > authz.MaxListLimit {
		return nil, invalid("list", fmt.Sprintf("limit is %d; expected 1 to %d, or 0 for %d", req.Limit, authz.MaxListLimit, authz.DefaultListLimit))
	}
	if req.Submitter != "" {
		if err := pipeline.ValidateDomain(req.Submitter); err != nil {
			return nil, invalid("list", fmt.Sprintf("submitter: %v", err))
		}
	}
	return call[authz.ListReply](ctx, c, "list", req)
}

// Cancel finishes one of the user's own batches as RemovedByOwner,
// wherever it stands, as the owner's Evict does. ErrNotFound for a batch
// that is not the user's (the owner may cancel any), ErrConflict for one
// that finished first. Safe to retry: a repeat answers as the first did,
// and finishes a cancel cut short.
func (c *Client) Cancel(ctx context.Context, req authz.IDRequest) (*authz.CancelReply, error) {
	if req.ID == 0 {
		return nil, invalid("cancel", "id is 0; expected a batch id (from 1)")
	}
	return call[authz.CancelReply](ctx, c, "cancel", req)
}
