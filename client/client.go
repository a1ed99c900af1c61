package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// DefaultTimeout bounds a request when Config.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// Config adjusts a Client; its zero value means the defaults.
type Config struct {
	// Timeout bounds each request, within the deadline of its ctx, which
	// may end it sooner. Default DefaultTimeout.
	Timeout time.Duration
	// SendsInFlight bounds the send requests of plain batches (no key, no
	// schedule; an idempotency key or none) the client keeps in flight: a Send
	// beyond it waits, and the Sends waiting go out together as one
	// send_many request as soon as one of those is answered. Default
	// DefaultSendsInFlight; negative: every Send goes out at once, alone.
	SendsInFlight int
}

// Client makes authz requests as one user. It is safe for concurrent use;
// the connection stays the caller's to close.
type Client struct {
	nc      *nats.Conn
	user    string
	timeout time.Duration
	groups  sendGroups
}

// New returns a client that speaks as user over nc. nc must be connected as
// user with the user's inbox prefix (_INBOX_<user>, which
// conn.Dial sets): authz answers nowhere else. New
// sends nothing; a missing authz shows on the first request (ErrNotRunning).
func New(nc *nats.Conn, user string, cfg Config) (*Client, error) {
	if nc == nil {
		return nil, errors.New("client: a connection is required")
	}
	if err := pipeline.ValidateDomain(user); err != nil {
		// A user is a subject token, as a domain is.
		return nil, fmt.Errorf("client: user %q: expected a name without '.', '*', '>' or spaces: %w", logging.Capped(user), err)
	}
	if inbox := nc.NewInbox(); !streams.IsInboxOf(inbox, user) {
		return nil, fmt.Errorf("client: the connection's inboxes look like %q, but authz answers %s only under %q: connect with its inbox prefix (conn.Dial or nats.CustomInboxPrefix)",
			inbox, user, streams.InboxPrefix(user)+".")
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("client: timeout %v: expected a positive duration, or zero for %v", cfg.Timeout, DefaultTimeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.SendsInFlight == 0 {
		cfg.SendsInFlight = DefaultSendsInFlight
	}
	return &Client{nc: nc, user: user, timeout: cfg.Timeout, groups: sendGroups{max: cfg.SendsInFlight}}, nil
}

// gaveUp is the error of a request on its way when ctx ended: at its
// deadline, no answer came before it; cancelled, the caller gave up. The
// request may have been carried out either way.
func (c *Client) gaveUp(ctx context.Context, op string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("client: %s as %s: %w before the deadline: %w", op, c.user, ErrNoAnswer, context.DeadlineExceeded)
	}
	return fmt.Errorf("client: %s: %w", op, ctx.Err())
}

// User is the user the client speaks as.
func (c *Client) User() string { return c.user }

// do sends data, a request encoded as JSON, to operation op and decodes
// the reply into out.
func (c *Client) do(ctx context.Context, op string, data []byte, out any) error {
	if max := c.nc.MaxPayload(); max > 0 && int64(len(data)) > max {
		return fmt.Errorf("%w: %s: the request is %d bytes, over the server's max_payload of %d bytes", ErrInvalid, op, len(data), max)
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	m, err := c.nc.RequestWithContext(rctx, streams.AuthzSubject(c.user, op), data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("client: %s: %w: %w", op, ErrNotRunning, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		if ctx.Err() == nil {
			return fmt.Errorf("client: %s as %s: %w within %v: %w", op, c.user, ErrNoAnswer, c.timeout, context.DeadlineExceeded)
		}
		return c.gaveUp(ctx, op)
	case err != nil:
		return fmt.Errorf("client: %s: %w", op, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, err := strconv.Atoi(code)
		if err != nil {
			n = 0
		}
		return &Error{Op: op, Code: n, Message: m.Header.Get(micro.ErrorHeader)}
	}
	var derr error
	switch r := out.(type) {
	// The hottest replies, read without reflection.
	case *api.SendReply:
		derr = r.UnmarshalJSON(m.Data)
	case *api.SendManyReply:
		derr = r.UnmarshalJSON(m.Data)
	default:
		derr = json.Unmarshal(m.Data, out)
	}
	if derr != nil {
		return fmt.Errorf("client: %s: decode reply of %d bytes: %w", op, len(m.Data), derr)
	}
	return nil
}
