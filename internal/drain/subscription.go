package drain

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Timeout bounds the last wait of a shutdown: for the messages still in
// the client once the admitted work is done. A closed Gate refuses each at
// once, so the bound is reached only when the connection is in trouble.
const Timeout = 5 * time.Second

// poll is how often Closed checks for a subscription closed along with its
// connection, which reports no status change.
const poll = 50 * time.Millisecond

// Watch returns what Closed waits on: call it before sub.Drain (or at
// subscribe time), so the change to SubscriptionClosed cannot be missed.
func Watch(sub *nats.Subscription) <-chan nats.SubStatus {
	return sub.StatusChanged(nats.SubscriptionClosed)
}

// Closed waits, at most bound, until the draining sub has closed: nats.go
// closes a draining subscription only once every message it held has been
// handed to the handler and the handler has returned. watch is Watch(sub).
// A subscription closed with its connection closes without a status
// change, and is noticed by polling. It returns an error matching
// ErrIncomplete when bound passes first.
func Closed(sub *nats.Subscription, watch <-chan nats.SubStatus, bound time.Duration) error {
	timer := time.NewTimer(bound)
	defer timer.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-watch:
			return nil
		case <-tick.C:
			if !sub.IsValid() {
				return nil
			}
		case <-timer.C:
			return fmt.Errorf("%w: subscription to %s still open after %s", ErrIncomplete, sub.Subject, bound)
		}
	}
}

// Delivered waits, at most bound, until every message the server sent nc
// before the call has been handed to its subscription's handler and the
// handler has returned. It is how a component waits on subscriptions it
// cannot reach, such as a micro service's endpoints after Stop.
//
// A flush makes the server process everything nc sent before it (the
// unsubscriptions of a drain or a micro Stop included) and makes nc read
// everything the server sent before its answer; a barrier then runs after
// every message already queued in each of nc's asynchronous subscriptions.
// It returns an error matching ErrIncomplete when bound passes first or the
// connection cannot flush.
func Delivered(nc *nats.Conn, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	if err := nc.FlushTimeout(bound); err != nil {
		return fmt.Errorf("%w: flush: %w", ErrIncomplete, err)
	}
	done := make(chan struct{})
	if err := nc.Barrier(func() { close(done) }); err != nil {
		return fmt.Errorf("%w: barrier: %w", ErrIncomplete, err)
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	select {
	case <-done:
		return nil
	case <-timer.C:
		return fmt.Errorf("%w: messages still queued in the client after %s", ErrIncomplete, bound)
	}
}
