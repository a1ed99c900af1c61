package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// consumerOf is the processors' consumer of prio's queue, as it stands.
func (p *parts) consumerOf(t *testing.T, prio pipeline.Priority) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := p.js.Consumer(p.ctx, streams.QueueStream(prio), streams.ProcessorConsumer(partsDomain))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// waitsOn starts n waits of w for d, and returns where each one's result
// comes, once all n wait on one request per queue.
func waitsOn(ctx context.Context, t *testing.T, p *parts, w *waker, n int, d time.Duration) []chan error {
	t.Helper()
	out := make([]chan error, n)
	for i := range out {
		out[i] = make(chan error, 1)
		go func() { out[i] <- w.wait(ctx, d) }()
	}
	testnats.Eventually(t, 10*time.Second, "every wait registered", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.waiters) == n
	})
	testnats.Eventually(t, 10*time.Second, "a request waiting on each queue", func() bool {
		return p.consumerOf(t, pipeline.High).NumWaiting == 1 && p.consumerOf(t, pipeline.Med).NumWaiting == 1
	})
	return out
}

// cancelledWait starts a wait on w whose context ends at once, and returns
// once it returned context.Canceled: its requests are left waiting on the
// server, with no waiter.
func cancelledWait(t *testing.T, p *parts, w *waker) {
	t.Helper()
	ctx, cancel := context.WithCancel(p.ctx)
	waits := waitsOn(ctx, t, p, w, 1, time.Minute)
	cancel()
	if err, ok := testnats.Receive(waits[0], 10*time.Second); !ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v (returned: %v), want context.Canceled", err, ok)
	}
}

// TestWakerWakesOnAToken: waits leave one request on each queue's
// consumer however many there are; a token that becomes deliverable wakes
// every one of them long before their time is up, delivered to the waker,
// which keeps it for the next tick and says no other was ready.
func TestWakerWakesOnAToken(t *testing.T) {
	p := startParts(t)
	w := &waker{nc: p.nc, domain: partsDomain}
	defer w.close()
	waits := waitsOn(p.ctx, t, p, w, 3, time.Minute)
	if _, err := p.js.Publish(p.ctx, streams.RequeueSubject(pipeline.Med, partsDomain), []byte("token")); err != nil {
		t.Fatal(err)
	}
	for i, ch := range waits {
		if err, ok := testnats.Receive(ch, 10*time.Second); !ok || err != nil {
			t.Fatalf("wait %d: %v (returned: %v), want woken", i, err, ok)
		}
	}
	info := p.consumerOf(t, pipeline.Med)
	if info.Delivered.Consumer != 1 || info.NumPending != 0 || info.NumAckPending != 1 {
		t.Fatalf("after the wake the consumer has delivered %d, %d pending, %d awaiting ack; want the token delivered to the waker",
			info.Delivered.Consumer, info.NumPending, info.NumAckPending)
	}
	if msgs, more := w.take(pipeline.High, 8); len(msgs) != 0 || !more {
		t.Fatalf("HIGH kept %d tokens (more: %v), want none (and the server asked)", len(msgs), more)
	}
	msgs, more := w.take(pipeline.Med, 8)
	if len(msgs) != 1 || more {
		t.Fatalf("MED kept %d tokens (more: %v), want the one, and no more ready", len(msgs), more)
	}
	if md, err := msgs[0].Metadata(); err != nil || md.NumDelivered != 1 || string(msgs[0].Data()) != "token" {
		t.Fatalf("the token kept: %+v, %v; want its first delivery", md, err)
	}
	if msgs, _ := w.take(pipeline.Med, 8); len(msgs) != 0 {
		t.Fatalf("MED kept %d tokens once taken, want none", len(msgs))
	}
}

// TestWakerDeliversEachTokenOnce: with two replicas' wakers waiting, a
// token is delivered to the one that waited longest, and the other goes on
// waiting, its queue quiet; given back, the token is delivered to the one
// still waiting.
func TestWakerDeliversEachTokenOnce(t *testing.T) {
	p := startParts(t)
	a, b := &waker{nc: p.nc, domain: partsDomain}, &waker{nc: p.nc, domain: partsDomain}
	defer a.close()
	defer b.close()
	wa := waitsOn(p.ctx, t, p, a, 1, time.Minute)
	wb := make(chan error, 1)
	go func() { wb <- b.wait(p.ctx, time.Minute) }()
	testnats.Eventually(t, 10*time.Second, "both requests waiting", func() bool { return p.consumerOf(t, pipeline.Med).NumWaiting == 2 })
	if _, err := p.js.Publish(p.ctx, streams.RequeueSubject(pipeline.Med, partsDomain), []byte("token")); err != nil {
		t.Fatal(err)
	}
	if err, ok := testnats.Receive(wa[0], 10*time.Second); !ok || err != nil {
		t.Fatalf("a's wait: %v (returned: %v), want woken", err, ok)
	}
	msgs, _ := a.take(pipeline.Med, 1)
	if len(msgs) != 1 {
		t.Fatalf("a kept %d tokens, want 1", len(msgs))
	}
	select {
	case err := <-wb:
		t.Fatalf("b woke (%v) for the token a took", err)
	default:
	}
	if !b.quiet(pipeline.Med) {
		t.Fatal("b's queue is not quiet while its request waits")
	}
	if err := msgs[0].Nak(); err != nil {
		t.Fatal(err)
	}
	if err, ok := testnats.Receive(wb, 10*time.Second); !ok || err != nil {
		t.Fatalf("b's wait: %v (returned: %v), want woken by the token given back", err, ok)
	}
	msgs, _ = b.take(pipeline.Med, 1)
	if len(msgs) != 1 {
		t.Fatalf("b kept %d tokens, want the one a gave back", len(msgs))
	}
	if md, err := msgs[0].Metadata(); err != nil || md.NumDelivered != 2 {
		t.Fatalf("the token b kept: %+v, %v; want its second delivery", md, err)
	}
}

// TestWakerWakesOnATokenKeptBefore: a token that came with a request
// whose wait was over (its waiter gone) is kept, and the next wait ends at
// once rather than at its bound.
func TestWakerWakesOnATokenKeptBefore(t *testing.T) {
	p := startParts(t)
	w := &waker{nc: p.nc, domain: partsDomain}
	defer w.close()
	cancelledWait(t, p, w)
	if _, err := p.js.Publish(p.ctx, streams.RequeueSubject(pipeline.Med, partsDomain), []byte("token")); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "the token kept", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.kept[pipeline.Med]) == 1
	})
	done := make(chan error, 1)
	go func() { done <- w.wait(p.ctx, time.Minute) }()
	if err, ok := testnats.Receive(done, 10*time.Second); !ok || err != nil {
		t.Fatalf("the next wait: %v (returned: %v), want over at once", err, ok)
	}
	if msgs, _ := w.take(pipeline.Med, 1); len(msgs) != 1 {
		t.Fatalf("%d tokens taken, want the one kept", len(msgs))
	}
}

// TestWakerKeepsForHalfTheAckWait: a token is kept at most half the
// shortest AckWait of the queues' consumers, and never over maxKept.
func TestWakerKeepsForHalfTheAckWait(t *testing.T) {
	for _, tc := range []struct {
		ackWaits []time.Duration
		want     time.Duration
	}{
		{nil, maxKept},
		{[]time.Duration{30 * time.Second, 30 * time.Second}, maxKept},
		{[]time.Duration{30 * time.Second, time.Second}, 500 * time.Millisecond},
		{[]time.Duration{time.Second, 30 * time.Second}, 500 * time.Millisecond},
		{[]time.Duration{4 * time.Second}, 2 * time.Second},
	} {
		w := &waker{}
		for _, d := range tc.ackWaits {
			w.keepFor(d)
		}
		if got := w.keptFor(); got != tc.want {
			t.Errorf("AckWaits %v: kept for %v, want %v", tc.ackWaits, got, tc.want)
		}
	}
}

// TestWakerReleases: the tokens a waker keeps go back to the queue when it
// releases them (a paused replica) or closes, and one kept too long is
// given back rather than taken.
func TestWakerReleases(t *testing.T) {
	p := startParts(t)
	w := &waker{nc: p.nc, domain: partsDomain}
	defer w.close()
	deliver := func() {
		t.Helper()
		waits := waitsOn(p.ctx, t, p, w, 1, time.Minute)
		if _, err := p.js.Publish(p.ctx, streams.RequeueSubject(pipeline.Med, partsDomain), []byte("token")); err != nil {
			t.Fatal(err)
		}
		if err, ok := testnats.Receive(waits[0], 10*time.Second); !ok || err != nil {
			t.Fatalf("wait: %v (returned: %v), want woken", err, ok)
		}
		if info := p.consumerOf(t, pipeline.Med); info.NumAckPending != 1 {
			t.Fatalf("%d tokens awaiting ack, want the one kept", info.NumAckPending)
		}
	}
	given := func(what string) {
		t.Helper()
		m := p.next(t, pipeline.Med) // delivered again at once, not after AckWait
		if md, err := m.Metadata(); err != nil || md.NumDelivered != 2 {
			t.Fatalf("%s: %+v, %v; want its second delivery", what, md, err)
		}
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	deliver()
	w.release()
	given("the token released")

	deliver()
	w.mu.Lock()
	for i := range w.kept[pipeline.Med] {
		w.kept[pipeline.Med][i].at = time.Now().Add(-2 * w.keptFor())
	}
	w.mu.Unlock()
	if msgs, _ := w.take(pipeline.Med, 8); len(msgs) != 0 {
		t.Fatalf("a token kept too long was taken: %d", len(msgs))
	}
	given("the token kept too long given back")

	deliver()
	w.close()
	given("the token kept by a closed waker")
}

// TestWakerEnds: a wait ends with its context's error when that ends
// first, and without one when its time is up; once closed, the waker
// subscribes again for the next wait.
func TestWakerEnds(t *testing.T) {
	p := startParts(t)
	w := &waker{nc: p.nc, domain: partsDomain}
	defer w.close()
	cancelledWait(t, p, w)
	// The cancelled wait's requests are still out; once they expire the
	// server's answers clear them.
	w.close()
	if w.sub != nil || w.out != nil {
		t.Fatal("close left the subscription")
	}
	if err := w.wait(p.ctx, 50*time.Millisecond); err != nil {
		t.Fatalf("a wait with nothing to wake it: %v, want nil once its time is up", err)
	}
	if w.sub == nil {
		t.Fatal("the wait after close did not subscribe again")
	}
	testnats.Eventually(t, 10*time.Second, "the expired requests answered", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.out) == 0
	})
}

// TestWakerQuiet: a queue is quiet while this waker's request on it is
// outstanding, and no longer once a token answers it, once it has
// expired, or once the connection has reconnected since it was sent.
func TestWakerQuiet(t *testing.T) {
	p := startParts(t)
	w := &waker{nc: p.nc, domain: partsDomain}
	defer w.close()
	for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		if w.quiet(prio) {
			t.Fatalf("%s quiet before any wait", prio)
		}
	}
	ctx, cancel := context.WithCancel(p.ctx)
	waits := waitsOn(ctx, t, p, w, 1, time.Minute)
	cancel()
	if _, ok := testnats.Receive(waits[0], 10*time.Second); !ok {
		t.Fatal("the cancelled wait did not return")
	}
	// The wait is over; its requests still wait on the server.
	for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		if !w.quiet(prio) {
			t.Fatalf("%s not quiet with its request outstanding", prio)
		}
	}
	if _, err := p.js.Publish(p.ctx, streams.RequeueSubject(pipeline.Med, partsDomain), []byte("token")); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "MED no longer quiet once a token is ready", func() bool { return !w.quiet(pipeline.Med) })
	if !w.quiet(pipeline.High) {
		t.Fatal("HIGH not quiet: a token in MED answered its request")
	}
	w.mu.Lock()
	r := w.out[pipeline.High]
	r.reconnects++
	w.out[pipeline.High] = r
	w.mu.Unlock()
	if w.quiet(pipeline.High) {
		t.Fatal("HIGH quiet on a request sent before the connection reconnected")
	}
	w.mu.Lock()
	w.out[pipeline.High] = waiting{until: time.Now().Add(-time.Millisecond), reconnects: p.nc.Stats().Reconnects}
	w.mu.Unlock()
	if w.quiet(pipeline.High) {
		t.Fatal("HIGH quiet on an expired request")
	}
}
