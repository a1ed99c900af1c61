package drain_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// TestGate: a closed gate refuses, and Wait waits for what it admitted,
// including goroutines started on an admission's behalf.
func TestGate(t *testing.T) {
	var g drain.Gate
	if !g.Enter() {
		t.Fatal("an open gate refused")
	}
	release := make(chan struct{})
	var ran atomic.Bool
	g.Go(func() {
		<-release
		ran.Store(true)
	})
	g.Leave()
	g.Close()
	if g.Enter() {
		t.Fatal("a closed gate admitted")
	}
	waited := make(chan struct{})
	go func() { g.Wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("Wait returned with a goroutine still running")
	default:
	}
	close(release)
	<-waited
	if !ran.Load() {
		t.Fatal("Wait returned before the goroutine ended")
	}
}

// held is a subscription whose handler blocks until release is closed.
type held struct {
	sub     *nats.Subscription
	handled atomic.Int32
	release chan struct{}
}

func subscribe(t *testing.T, nc *nats.Conn, subject string) *held {
	t.Helper()
	h := &held{release: make(chan struct{})}
	var err error
	h.sub, err = nc.Subscribe(subject, func(*nats.Msg) {
		<-h.release
		h.handled.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	return h
}

func publish(t *testing.T, nc *nats.Conn, subject string, n int) {
	t.Helper()
	for range n {
		if err := nc.Publish(subject, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestClosedWaitsForTheHandler: a draining subscription counts as closed
// only once its handler has returned for every message it held.
func TestClosedWaitsForTheHandler(t *testing.T) {
	env := testnats.Start(t, nil)
	nc, pub := env.Conn(t, "admin"), env.Conn(t, "admin")
	h := subscribe(t, nc, "drain.test")
	watch := drain.Watch(h.sub)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "drain.test", 3)
	if err := h.sub.Drain(); err != nil {
		t.Fatal(err)
	}
	if err := drain.Closed(h.sub, watch, 100*time.Millisecond); !errors.Is(err, drain.ErrIncomplete) {
		t.Fatalf("Closed with the handler held: %v, want ErrIncomplete", err)
	}
	close(h.release)
	if err := drain.Closed(h.sub, watch, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := h.handled.Load(); n != 3 {
		t.Fatalf("closed after %d of 3 messages", n)
	}
}

// TestClosedNoticesAClosedConnection: a subscription closed with its
// connection reports no status change, and Closed returns all the same.
func TestClosedNoticesAClosedConnection(t *testing.T) {
	env := testnats.Start(t, nil)
	nc := env.Conn(t, "admin")
	sub, err := nc.Subscribe("drain.test", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	watch := drain.Watch(sub)
	nc.Close()
	if err := drain.Closed(sub, watch, 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestDeliveredWaitsForQueuedMessages: Delivered returns only once every
// message already in the client has been handled, on subscriptions it
// is not given.
func TestDeliveredWaitsForQueuedMessages(t *testing.T) {
	env := testnats.Start(t, nil)
	nc, pub := env.Conn(t, "admin"), env.Conn(t, "admin")
	a, b := subscribe(t, nc, "drain.a"), subscribe(t, nc, "drain.b")
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "drain.a", 2)
	publish(t, pub, "drain.b", 3)
	if err := drain.Delivered(nc, 100*time.Millisecond); !errors.Is(err, drain.ErrIncomplete) {
		t.Fatalf("Delivered with the handlers held: %v, want ErrIncomplete", err)
	}
	close(a.release)
	close(b.release)
	if err := drain.Delivered(nc, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if na, nb := a.handled.Load(), b.handled.Load(); na != 2 || nb != 3 {
		t.Fatalf("Delivered returned after %d of 2 and %d of 3 messages", na, nb)
	}
}
