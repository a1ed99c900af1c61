package jsapi

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Fetcher takes messages from one pull consumer with no-wait requests, as
// jetstream's FetchNoWait does, but on subscriptions kept for the next
// fetch. jetstream's fetch subscribes a new inbox for every request and
// unsubscribes it after, which costs the server a subscription and its
// removal (and its subject cache a flush) per request, and the client a
// goroutine and two channels sized to the batch. A processor that ticks
// often with little in its queues makes one or two requests per batch, so
// that was a large part of its cost.
//
// The server answers a no-wait request with the messages it can deliver
// now, up to the batch asked for, then, if it delivered fewer, with a
// status "404 No Messages" (or "408" when other requests wait, or at the
// end of a replicated consumer's answer); a request that got its whole
// batch has no status. One it cannot serve yet it leaves unanswered: a
// consumer with as many messages awaiting acknowledgement as its
// MaxAckPending, and more to deliver, holds the request until an
// acknowledgement frees a slot. A fetch therefore ends after a silence,
// as jetstream's does (one second from the request or the last message).
//
// The messages come with their own subjects, not the request's reply, so a
// subscription serves one request at a time: a fetch takes an idle one, or
// subscribes a new inbox, and gives it back once its answer is complete
// (its batch, or a 404 or 408). One whose answer ended otherwise (a
// silence, another status, an error) is dropped, never reused: what that
// answer may still bring goes nowhere and is redelivered after its ack
// wait, as with jetstream's fetch.
type Fetcher struct {
	nc      *nats.Conn
	subject string
	silence time.Duration

	mu   sync.Mutex
	idle []*nats.Subscription
}

// DefaultFetchSilence is how long a fetch waits for the server's next
// message before it ends: jetstream's fetch waits as long.
const DefaultFetchSilence = time.Second

// maxIdleFetchSubs bounds the subscriptions a Fetcher keeps for the next
// fetches: as many as fetches made at once, up to this.
const maxIdleFetchSubs = 8

// NewFetcher returns a Fetcher of consumer on stream over nc; silence is
// how long a fetch waits for the server's next message before it ends
// (DefaultFetchSilence if ≤ 0).
func NewFetcher(nc *nats.Conn, stream, consumer string, silence time.Duration) *Fetcher {
	if silence <= 0 {
		silence = DefaultFetchSilence
	}
	return &Fetcher{nc: nc, subject: "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer, silence: silence}
}

// FetchNoWait takes up to n messages the consumer can deliver now; with
// none to deliver, it returns at once with none and no error. It returns
// the messages it took even when it also returns an error, which says why
// the answer ended short: ErrFetchNoAnswer after a silence, the status the
// server answered, or the connection's error. Safe for concurrent use.
func (f *Fetcher) FetchNoWait(n int) ([]jetstream.Msg, error) {
	if n <= 0 {
		return nil, nil
	}
	sub, err := f.take()
	if err != nil {
		return nil, fmt.Errorf("fetch from %s: subscribe: %w", f.subject, err)
	}
	var body [48]byte
	req := append(strconv.AppendInt(append(body[:0], `{"batch":`...), int64(n), 10), `,"no_wait":true}`...)
	if err := f.nc.PublishRequest(f.subject, sub.Subject, req); err != nil {
		f.give(sub)
		return nil, fmt.Errorf("fetch from %s: %w", f.subject, err)
	}
	var msgs []jetstream.Msg
	for len(msgs) < n {
		m, err := sub.NextMsg(f.silence)
		if err != nil {
			// The rest of the answer may still come: never reuse sub.
			_ = sub.Unsubscribe()
			if errors.Is(err, nats.ErrTimeout) {
				err = ErrFetchNoAnswer
			}
			return msgs, fmt.Errorf("fetch from %s: %w", f.subject, err)
		}
		if len(m.Data) == 0 && m.Header != nil {
			if status := m.Header.Get("Status"); status != "" {
				if status == "404" || status == "408" {
					f.give(sub) // the answer is complete
					return msgs, nil
				}
				_ = sub.Unsubscribe()
				return msgs, fmt.Errorf("fetch from %s: the server answered %s %s", f.subject, status, m.Header.Get("Description"))
			}
		}
		if !strings.HasPrefix(m.Reply, "$JS.ACK.") {
			continue // not a delivery: nothing the server sends here
		}
		msgs = append(msgs, &Consumed{msg: m, nc: f.nc})
	}
	f.give(sub)
	return msgs, nil
}

// take returns an idle subscription with nothing waiting on it, or a new
// one. One that holds a message (nothing should) gives its deliveries back
// to the consumer and is dropped.
func (f *Fetcher) take() (*nats.Subscription, error) {
	for {
		f.mu.Lock()
		k := len(f.idle)
		if k == 0 {
			f.mu.Unlock()
			return f.nc.SubscribeSync(f.nc.NewInbox())
		}
		sub := f.idle[k-1]
		f.idle = f.idle[:k-1]
		f.mu.Unlock()
		if n, _, err := sub.Pending(); err == nil && n == 0 {
			return sub, nil
		}
		for {
			m, err := sub.NextMsg(0)
			if err != nil {
				break
			}
			if strings.HasPrefix(m.Reply, "$JS.ACK.") {
				_ = f.nc.Publish(m.Reply, ackNak)
			}
		}
		_ = sub.Unsubscribe()
	}
}

// give keeps a subscription whose answer is complete for the next fetch.
func (f *Fetcher) give(sub *nats.Subscription) {
	f.mu.Lock()
	if len(f.idle) < maxIdleFetchSubs && sub.IsValid() {
		f.idle = append(f.idle, sub)
		sub = nil
	}
	f.mu.Unlock()
	if sub != nil {
		_ = sub.Unsubscribe()
	}
}

var (
	ackAck  = []byte("+ACK")
	ackNak  = []byte("-NAK")
	ackWPI  = []byte("+WPI")
	ackTerm = []byte("+TERM")
)

// Consumed is a message delivered to a Fetcher: a jetstream.Msg whose
// acknowledgements are published on the fetcher's connection, as
// jetstream's own messages are on theirs.
type Consumed struct {
	msg   *nats.Msg
	nc    *nats.Conn
	acked atomic.Bool
}

var _ jetstream.Msg = (*Consumed)(nil)

// NewConsumed is m, delivered by a pull request of one's own on nc (not a
// Fetcher's), as a Consumed.
func NewConsumed(nc *nats.Conn, m *nats.Msg) *Consumed { return &Consumed{msg: m, nc: nc} }

// Metadata reads the delivery's metadata from its acknowledgement subject.
func (c *Consumed) Metadata() (*jetstream.MsgMetadata, error) { return MetadataOf(c.msg.Reply) }

// Data returns the message's body.
func (c *Consumed) Data() []byte { return c.msg.Data }

// Headers returns the message's headers.
func (c *Consumed) Headers() nats.Header { return c.msg.Header }

// Subject returns the subject the message was stored under.
func (c *Consumed) Subject() string { return c.msg.Subject }

// Reply returns the acknowledgement subject.
func (c *Consumed) Reply() string { return c.msg.Reply }

// Ack acknowledges the message.
func (c *Consumed) Ack() error { return c.settle(ackAck) }

// DoubleAck acknowledges the message and waits for the server to confirm
// it.
func (c *Consumed) DoubleAck(ctx context.Context) error {
	if c.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if c.acked.Load() {
		return jetstream.ErrMsgAlreadyAckd
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, doubleAckTimeout)
		defer cancel()
	}
	if _, err := c.nc.RequestWithContext(ctx, c.msg.Reply, ackAck); err != nil {
		return err
	}
	c.acked.Store(true)
	return nil
}

// doubleAckTimeout bounds DoubleAck's wait when ctx has no deadline, as
// jetstream's default timeout does.
const doubleAckTimeout = 5 * time.Second

// Nak asks for the message to be redelivered now.
func (c *Consumed) Nak() error { return c.settle(ackNak) }

// NakWithDelay asks for the message to be redelivered after delay.
func (c *Consumed) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return c.settle(ackNak)
	}
	return c.settle(fmt.Appendf(nil, `-NAK {"delay": %d}`, delay.Nanoseconds()))
}

// InProgress resets the message's ack wait.
func (c *Consumed) InProgress() error {
	if c.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if c.acked.Load() {
		return jetstream.ErrMsgAlreadyAckd
	}
	return c.nc.Publish(c.msg.Reply, ackWPI)
}

// Term tells the server never to redeliver the message.
func (c *Consumed) Term() error { return c.settle(ackTerm) }

// TermWithReason is Term with a reason the server reports in its advisory.
func (c *Consumed) TermWithReason(reason string) error {
	return c.settle(fmt.Appendf(nil, "+TERM %s", reason))
}

// settle publishes a final acknowledgement, once.
func (c *Consumed) settle(body []byte) error {
	if c.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	if c.acked.Swap(true) {
		return jetstream.ErrMsgAlreadyAckd
	}
	if err := c.nc.Publish(c.msg.Reply, body); err != nil {
		c.acked.Store(false)
		return err
	}
	return nil
}
