package client

import (
	"context"

	"github.com/tickflow/tickflow/authz"
)

// Senders lists a domain's senders in the order they joined its pool:
// free, or leased to a key (or an unkeyed batch) for a batch since a time.
// Owner only (ErrForbidden).
func (c *Client) Senders(ctx context.Context, req authz.SendersRequest) (*authz.SendersReply, error) {
	if err := checkDomain("senders", req.Domain); err != nil {
		return nil, err
	}
	return call[authz.SendersReply](ctx, c, "senders", req)
}
