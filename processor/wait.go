package processor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// waker lets an idle processor wait for work without polling its queues.
//
// It leaves a pull request for one token waiting on each queue's consumer.
// The server delivers a token that becomes ready (a new one, or a retry
// whose delay is over) to the request that has waited longest, of whichever
// replica: exactly one replica is woken by each token, with the token in
// hand, and the others go on waiting. The waker keeps the token for the
// tick that follows (take), and wakes the waiters of its queue. A request
// that expires is closed by the server with "408 Request Timeout", which
// wakes them too. One request per queue is outstanding at a time, so a
// processor adds at most two to its consumers' waiting requests.
//
// Waiting with a request that the server could not fill (at most one
// byte: no token fits) woke every replica for every token, and all but one
// then asked for a token that was gone: at a moderate rate each extra
// replica cost every batch two more requests.
type waker struct {
	nc     *nats.Conn
	domain string
	mu     sync.Mutex
	inbox  string
	sub    *nats.Subscription
	// out holds, per queue, its outstanding request.
	out map[pipeline.Priority]waiting
	// waiters holds, per waiter, the queues whose answer wakes it.
	waiters map[chan struct{}][]pipeline.Priority
	// kept holds, per queue, the tokens delivered to its requests and not
	// yet taken by a tick.
	kept map[pipeline.Priority][]keptToken
	// keep is how long a token is kept at most (keepFor); 0: maxKept.
	keep time.Duration
}

// keptToken is a token the server delivered to a waker's request.
type keptToken struct {
	msg *jsapi.Consumed
	at  time.Time
	// pending is how many more tokens the consumer held ready when it
	// delivered this one (the delivery's metadata).
	pending uint64
}

// maxKept is how long a delivered token is kept for a tick at most: one
// kept longer (a caller of WaitWork that did not tick after it) is given
// back to the consumer instead, well before its AckWait would have it
// delivered again while it is kept (keepFor: at most half the AckWait).
const maxKept = 5 * time.Second

// keepFor bounds how long a token is kept to half of ackWait, the shortest
// of the queues' consumers' (a token kept past its AckWait would be
// delivered again while it is kept), and to maxKept.
func (w *waker) keepFor(ackWait time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if ackWait > 0 {
		w.keep = min(w.keptFor(), ackWait/2)
	}
}

// keptFor is how long a token is kept at most. w.mu is held.
func (w *waker) keptFor() time.Duration {
	if w.keep > 0 {
		return w.keep
	}
	return maxKept
}

// WaitWork blocks until a token may be ready in the domain's HIGH or MED
// queue, at most d, or until ctx is done. A processor that ticks itself
// calls it after a tick that found no messages, instead of polling: the
// server delivers a token that becomes ready to the replica that has waited
// longest, which keeps it for its next tick (Tick takes it before it asks
// the server for more; call Tick soon after: a token kept over 5 seconds,
// or half the consumer's AckWait if that is shorter, goes back to the
// queue), and a waiting processor costs nothing meanwhile.
// The wait also ends when its request expires. It returns ctx's error when
// ctx ends the wait, and an error when the wait could not be set up;
// otherwise nil. Safe for concurrent use.
func (p *Processor) WaitWork(ctx context.Context, d time.Duration) error {
	return p.waker.wait(ctx, d)
}

// wait is WaitWork.
func (w *waker) wait(ctx context.Context, d time.Duration) error {
	if d < minWorkWait {
		d = minWorkWait
	}
	ch, stop, err := w.watch(d, pipeline.High, pipeline.Med)
	if err != nil {
		return err
	}
	defer stop()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch leaves a request expiring after d on the consumer of each of
// prios's queues that has none outstanding, and returns a channel closed
// as soon as the server answers one of those (a token became ready, or
// the request expired), and stop, which forgets the channel. Safe for
// concurrent use.
func (w *waker) watch(d time.Duration, prios ...pipeline.Priority) (<-chan struct{}, func(), error) {
	ch := make(chan struct{})
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub == nil {
		w.inbox = w.nc.NewInbox()
		sub, err := w.nc.Subscribe(w.inbox+".*", w.answer)
		if err != nil {
			return nil, nil, fmt.Errorf("processor: wait for work: %w", err)
		}
		w.sub, w.out, w.waiters = sub, map[pipeline.Priority]waiting{}, map[chan struct{}][]pipeline.Priority{}
		w.kept = map[pipeline.Priority][]keptToken{}
	}
	now, reconnects := time.Now(), w.nc.Stats().Reconnects
	for _, prio := range prios {
		if w.outstanding(prio, now, reconnects) {
			continue // still waiting on the server: its answer wakes us too
		}
		body := fmt.Appendf(nil, `{"batch":1,"expires":%d}`, d.Nanoseconds())
		subj := "$JS.API.CONSUMER.MSG.NEXT." + streams.QueueStream(prio) + "." + streams.ProcessorConsumer(w.domain)
		if err := w.nc.PublishRequest(subj, w.inbox+"."+string(prio), body); err != nil {
			return nil, nil, fmt.Errorf("processor: wait for work on %s: %w", streams.QueueStream(prio), err)
		}
		// A request whose answer never comes (lost with a reconnect, or
		// with a consumer leader that moved) is sent again once the
		// connection has reconnected or the request has expired.
		w.out[prio] = waiting{until: now.Add(d), reconnects: reconnects}
	}
	w.waiters[ch] = prios
	for _, prio := range prios {
		if len(w.kept[prio]) > 0 {
			// A token came with a request whose waiter had gone (its wait
			// over): it is kept already, so this wait is over at once.
			close(ch)
			delete(w.waiters, ch)
			break
		}
	}
	return ch, func() {
		w.mu.Lock()
		delete(w.waiters, ch)
		w.mu.Unlock()
	}, nil
}

// waiting is a request WaitWork left on a queue's consumer.
type waiting struct {
	// until is when it expires.
	until time.Time
	// reconnects is the connection's count of reconnections when it was
	// sent: a request sent before a reconnection may be lost with it.
	reconnects uint64
}

// quiet says whether prio's queue had no ready token for this replica a
// moment ago: this waker's request on its consumer is still outstanding
// (the server fills it as soon as a token becomes deliverable and no
// request waited longer) and was sent on the connection as it is now (a
// reconnection loses it). A tick does not fetch from a quiet queue: that
// saves a round trip to the server per queue and tick. A token that became
// ready meanwhile comes with the request's answer, which wakes the tick's
// next look. A consumer whose leader moves (a cluster) drops its waiting
// requests unanswered: the queue then counts as quiet until the request's
// expiry, the wait's bound (Options.IdleWait), which the wait itself
// already lasts in that case.
func (w *waker) quiet(prio pipeline.Priority) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.out[prio]; !ok {
		return false // no request: the connection's count is not needed
	}
	return w.outstanding(prio, time.Now(), w.nc.Stats().Reconnects)
}

// take returns up to n of the tokens delivered to this waker's requests on
// prio's queue, oldest first, and whether the consumer may hold more ready
// ones: false when it said, as it delivered the newest of them, that it
// held no other. A token kept longer than keptFor is given back to the
// consumer (a NAK) rather than returned.
func (w *waker) take(prio pipeline.Priority, n int) (msgs []jetstream.Msg, more bool) {
	w.mu.Lock()
	kept := w.kept[prio]
	if len(kept) == 0 {
		w.mu.Unlock()
		return nil, true
	}
	k := min(n, len(kept))
	taken := kept[:k:k]
	w.kept[prio] = kept[k:]
	more = len(kept) > k || kept[k-1].pending > 0
	limit := w.keptFor()
	w.mu.Unlock()
	now := time.Now()
	for _, t := range taken {
		if now.Sub(t.at) > limit {
			_ = t.msg.Nak()
			continue
		}
		msgs = append(msgs, t.msg)
	}
	return msgs, more
}

// release gives every token kept back to its consumer (a NAK, so it is
// delivered again at once, to a replica that waits): a paused domain's
// replica, or one that stops, does not hold them.
func (w *waker) release() {
	w.mu.Lock()
	var all []keptToken
	for prio, kept := range w.kept {
		all = append(all, kept...)
		delete(w.kept, prio)
	}
	w.mu.Unlock()
	for _, t := range all {
		_ = t.msg.Nak()
	}
}

// outstanding says whether this waker's request on prio's queue waits on
// the server at now: sent, not answered, not expired, and not lost with a
// reconnection since (reconnects is the connection's count now). w.mu is
// held.
func (w *waker) outstanding(prio pipeline.Priority, now time.Time, reconnects uint64) bool {
	r, ok := w.out[prio]
	return ok && now.Before(r.until) && reconnects == r.reconnects
}

// minWorkWait is the shortest wait WaitWork asks the server for.
const minWorkWait = time.Millisecond

// answer takes the server's answer to a waiting request: a token, which it
// keeps for the next tick, or a status (408: expired; or an error).
// Either way the request is over, and every waiter that watches its queue
// wakes.
func (w *waker) answer(m *nats.Msg) {
	// A status comes on the request's reply subject, which names the
	// queue; a token comes on its own subject, and its acknowledgement
	// subject names its stream.
	prio := pipeline.Priority(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	var t *keptToken
	if strings.HasPrefix(m.Reply, "$JS.ACK.") {
		md, err := jsapi.MetadataOf(m.Reply)
		if err != nil {
			return // not a delivery of a queue: nothing the server sends here
		}
		prio = pipeline.High
		if md.Stream != streams.QueueStream(pipeline.High) {
			prio = pipeline.Med
		}
		t = &keptToken{msg: jsapi.NewConsumed(w.nc, m), at: time.Now(), pending: md.NumPending}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t != nil {
		if w.sub == nil {
			_ = t.msg.Nak() // closed meanwhile: nobody takes it here
		} else {
			w.kept[prio] = append(w.kept[prio], *t)
		}
	}
	delete(w.out, prio)
	for ch, prios := range w.waiters {
		if slices.Contains(prios, prio) {
			close(ch)
			delete(w.waiters, ch)
		}
	}
}

// close ends the waits' subscription and gives back the tokens kept; a
// later WaitWork subscribes again. A token the server sent before it saw
// the subscription end is redelivered after the consumer's AckWait, as a
// fetch's answer lost with its connection is.
func (w *waker) close() {
	w.mu.Lock()
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
		w.sub, w.out = nil, nil
	}
	w.mu.Unlock()
	w.release()
}
