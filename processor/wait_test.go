package processor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// waiting returns how many pull requests wait on the processors' consumer
// of the queue at prio, and how many tokens it holds undelivered and
// unacknowledged.
func (b *bundle) waiting(t *testing.T, prio pipeline.Priority) (waiting int, pending uint64, ackPending int) {
	t.Helper()
	c, err := b.admin.Consumer(b.ctx, streams.QueueStream(prio), streams.ProcessorConsumer(domain))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.NumWaiting, info.NumPending, info.NumAckPending
}

// An idle processor's wait for work ends when a token arrives, delivered
// to it and kept for the tick that follows, and costs no polling: one
// request per queue waits on the server, however often the wait is renewed.
func TestWaitWorkWakesWithTheToken(t *testing.T) {
	b := setup(t)
	b.startWorker(t, b.ctx)
	p := b.processor(t, processor.Options{})

	// Renewed waits reuse the request still waiting on each queue.
	for range 5 {
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Millisecond)
		err := p.WaitWork(ctx, time.Minute)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait on empty queues: %v, want the context's deadline", err)
		}
	}
	for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		if n, _, _ := b.waiting(t, prio); n != 1 {
			t.Fatalf("%s: %d waiting requests after five waits, want 1", prio, n)
		}
	}

	woke := make(chan error, 1)
	go func() { woke <- p.WaitWork(b.ctx, time.Minute) }()
	id := b.enqueue(t, pipeline.Batch{Priority: pipeline.Med, Functions: []pipeline.Function{noop()}})
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end when a token arrived")
	}
	// The wake brought the token: delivered to the request, which is over.
	if n, pending, ackPending := b.waiting(t, pipeline.Med); n != 0 || pending != 0 || ackPending != 1 {
		t.Fatalf("after the wake: %d waiting, %d pending, %d awaiting ack; want the token delivered to the wait", n, pending, ackPending)
	}
	asked := b.askedQueues(t)
	rep := p.Tick(b.ctx, 1)
	if len(rep.Steps) != 1 || rep.Steps[0].BatchID != id || rep.Steps[0].Action != api.ActionFinished {
		t.Fatalf("the tick after the wake: %+v, want batch %d finished", rep, id)
	}
	if got := asked(); len(got) != 0 {
		t.Fatalf("the tick after the wake asked the queues' consumers %v, want nothing: the token was in hand", got)
	}
}

// A wait with nothing to wake it ends after its bound.
func TestWaitWorkEndsAfterItsBound(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	start := time.Now()
	if err := p.WaitWork(b.ctx, 150*time.Millisecond); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 5*time.Second {
		t.Fatalf("a 150ms wait on empty queues took %s", el)
	}
}
