package client

import (
	"context"

	"github.com/tickflow/tickflow/api"
)

// Senders lists a domain's senders in the order they joined its pool:
// free, or leased to a key (or an unkeyed batch) for a batch since a time.
// Owner only (ErrForbidden).
func (c *Client) Senders(ctx context.Context, req api.SendersRequest) (*api.SendersReply, error) {
	if err := checkDomain(api.OpSenders, req.Domain); err != nil {
		return nil, err
	}
	return call[api.SendersReply](ctx, c, api.OpSenders, req)
}
