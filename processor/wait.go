package processor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// waker lets an idle processor wait for work without polling its queues.
//
// It leaves a pull request of at most one byte waiting on each queue's
// consumer. No token fits in one byte, so the server never delivers one on
// it: when a token becomes deliverable (a new one, or a retry whose delay
// is over) it closes the request with "409 Message Size Exceeds MaxBytes"
// and leaves the token where it was, neither delivered nor counted as a
// delivery; when nothing comes it closes it with "408 Request Timeout" at
// its expiry. Either answer wakes the waiters, who then tick and fetch as
// usual. One request per queue is outstanding at a time, so a processor
// adds at most two to its consumers' waiting requests.
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
}

// WaitWork blocks until a token may be ready in the domain's HIGH or MED
// queue, at most d, or until ctx is done; it fetches nothing. A processor
// that ticks itself calls it after a tick that found no messages, instead of
// polling: the server answers as soon as a token becomes deliverable, and
// a waiting processor costs nothing meanwhile. A wake is a hint, not a
// promise: another replica may take the token first, and the wait also ends
// when its request expires. It returns ctx's error when ctx ends the wait,
// and an error when the wait could not be set up; otherwise nil. Safe for
// concurrent use.
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
	}
	now, reconnects := time.Now(), w.nc.Stats().Reconnects
	for _, prio := range prios {
		if w.outstanding(prio, now, reconnects) {
			continue // still waiting on the server: its answer wakes us too
		}
		body := fmt.Appendf(nil, `{"batch":1,"max_bytes":1,"expires":%d}`, d.Nanoseconds())
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

// quiet says whether prio's queue had no ready token a moment ago: this
// waker's request on its consumer is still outstanding (the server closes
// it as soon as a token becomes deliverable) and was sent on the
// connection as it is now (a reconnection loses it). A tick does not
// fetch from a quiet queue: at a moderate rate, where every replica is
// woken by each token and most fetches come back empty, that saves a round
// trip to the server per queue and tick. A token that became ready while
// the server's answer is on its way is fetched by the next look, which the
// answer itself brings about (it wakes the waiters; or the next wait finds
// the queue no longer quiet and asks again, and the server answers at
// once). A consumer whose leader moves (a cluster) drops its waiting
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

// answer takes the server's answer to a waiting request: whatever it says
// (409: a token is deliverable; 408: expired; an error), the request is
// over, and every waiter that watches its queue wakes.
func (w *waker) answer(m *nats.Msg) {
	prio := pipeline.Priority(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:])
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.out, prio)
	for ch, prios := range w.waiters {
		if slices.Contains(prios, prio) {
			close(ch)
			delete(w.waiters, ch)
		}
	}
}

// close ends the waits' subscription; a later WaitWork subscribes again.
func (w *waker) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
		w.sub, w.out = nil, nil
	}
}
