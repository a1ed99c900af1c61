package testsystem

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/testnats"
)

// Stopping runs a component as a command runs it, for a test that stops
// it under load: its connection closes the moment Run returns, as a
// command's deferred Close does, so a request it answered later would
// never be answered. The zero value is ready to Start, and Returned false
// until then: a handler may ask it before the component runs.
type Stopping struct {
	returned atomic.Bool
	done     chan error
}

// Start runs run, the Run of nc's component, under ctx.
func (s *Stopping) Start(ctx context.Context, nc *nats.Conn, run func(context.Context) error) {
	s.done = make(chan error, 1)
	go func() {
		err := run(ctx)
		s.returned.Store(true)
		nc.Close()
		s.done <- err
	}()
}

// Returned reports whether Run has returned.
func (s *Stopping) Returned() bool { return s.returned.Load() }

// stopBound is how long Wait waits for Run to return: far past any
// shutdown's own bounds (a handler's deadline, the record window, the
// drain's), so that a Run that never returns fails its test instead of
// hanging the suite.
const stopBound = 2 * time.Minute

// Wait waits for Run to return (its context cancelled by the caller) and
// fails the test on its error, or when Run has not returned within
// stopBound.
func (s *Stopping) Wait(t testing.TB) {
	t.Helper()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(stopBound):
		t.Fatalf("Run has not returned %s after its context was cancelled", stopBound)
	}
}

// Hold is a gate handlers wait at until the test releases them, so that a
// component can be stopped with its slots taken.
type Hold struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

// NewHold returns a gate that buffers n starts; it is released when the
// test ends, if not before.
func NewHold(t testing.TB, n int) *Hold {
	h := &Hold{started: make(chan struct{}, n), release: make(chan struct{})}
	t.Cleanup(h.Release)
	return h
}

// Wait says a handler started and waits until Release. Once released it
// says so only where Started has room: a test that read what it waited
// for reads no more, and a handler must not wait for it.
func (h *Hold) Wait() {
	select {
	case h.started <- struct{}{}:
	case <-h.release:
		return
	}
	<-h.release
}

// Started receives once per handler that reached Wait.
func (h *Hold) Started() <-chan struct{} { return h.started }

// Release lets every handler waiting, and every later one, through.
func (h *Hold) Release() { h.once.Do(func() { close(h.release) }) }

// Answers collects the answers to requests sent with reply subjects
// Reply(i) on one connection.
type Answers struct {
	inbox string
	first chan struct{}
	mu    sync.Mutex
	by    map[string][]*nats.Msg
}

// Collect subscribes on a new inbox of nc, with no pending limit: every
// answer of a burst is kept.
func Collect(t testing.TB, nc *nats.Conn) *Answers {
	t.Helper()
	a := &Answers{inbox: nc.NewInbox(), first: make(chan struct{}, 1), by: map[string][]*nats.Msg{}}
	sub, err := nc.Subscribe(a.inbox+".*", func(m *nats.Msg) {
		a.mu.Lock()
		a.by[m.Subject] = append(a.by[m.Subject], m)
		a.mu.Unlock()
		select {
		case a.first <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return a
}

// Reply is the reply subject of request i.
func (a *Answers) Reply(i int) string { return a.inbox + "." + strconv.Itoa(i) }

// First receives once the first answer arrived.
func (a *Answers) First() <-chan struct{} { return a.first }

// Count is how many requests were answered.
func (a *Answers) Count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.by)
}

// WaitAll waits until n requests are answered; a test that fails says how
// many were.
func (a *Answers) WaitAll(t testing.TB, n int, what string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("answered %d of %d %s", a.Count(), n, what)
		}
	})
	testnats.Eventually(t, 5*time.Second, "every one of "+what+" answered", func() bool { return a.Count() == n })
}

// Once returns request i's answer, and fails the test unless it was
// answered exactly once.
func (a *Answers) Once(t testing.TB, what string, i int) *nats.Msg {
	t.Helper()
	a.mu.Lock()
	ms := a.by[a.Reply(i)]
	a.mu.Unlock()
	if len(ms) != 1 {
		t.Fatalf("%s %d answered %d times", what, i, len(ms))
	}
	return ms[0]
}

// Refused reports whether m, the answer to request i, is an error reply,
// and fails the test unless that error is "503": the component refused
// the request as it stopped, and a client may send it again.
func Refused(t testing.TB, what string, i int, m *nats.Msg) bool {
	t.Helper()
	code := m.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		return false
	}
	if code != "503" {
		t.Fatalf("%s %d answered %s %s", what, i, code, m.Header.Get(micro.ErrorHeader))
	}
	return true
}
