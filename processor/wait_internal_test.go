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

// TestWakerWakesOnAToken: waits leave one request on each queue's
// consumer however many there are; a token that becomes deliverable wakes
// every one of them long before their time is up, and stays in its queue,
// neither delivered nor counted as a delivery.
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
	if info.Delivered.Consumer != 0 || info.NumPending != 1 || info.NumAckPending != 0 {
		t.Fatalf("after the wake the consumer has delivered %d, %d pending, %d awaiting ack; want the token untouched",
			info.Delivered.Consumer, info.NumPending, info.NumAckPending)
	}
	m := p.next(t, pipeline.Med)
	if md, err := m.Metadata(); err != nil || md.NumDelivered != 1 {
		t.Fatalf("the token once fetched: %+v, %v; want its first delivery", md, err)
	}
}

// TestWakerEnds: a wait ends with its context's error when that ends
// first, and without one when its time is up; once closed, the waker
// subscribes again for the next wait.
func TestWakerEnds(t *testing.T) {
	p := startParts(t)
	w := &waker{nc: p.nc, domain: partsDomain}
	defer w.close()
	ctx, cancel := context.WithCancel(p.ctx)
	waits := waitsOn(ctx, t, p, w, 1, time.Minute)
	cancel()
	if err, ok := testnats.Receive(waits[0], 10*time.Second); !ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled wait: %v (returned: %v), want context.Canceled", err, ok)
	}
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
