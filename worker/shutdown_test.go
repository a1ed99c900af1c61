package worker_test

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
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
	"github.com/tickflow/tickflow/worker"
)

// answers collects the answers on one inbox, one request per reply subject.
type answers struct {
	mu sync.Mutex
	by map[string]*nats.Msg
	n  map[string]int
}

func collect(t *testing.T, nc *nats.Conn, inbox string) *answers {
	t.Helper()
	a := &answers{by: map[string]*nats.Msg{}, n: map[string]int{}}
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		a.mu.Lock()
		a.by[m.Subject] = m
		a.n[m.Subject]++
		a.mu.Unlock()
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

func (a *answers) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.by)
}

func (a *answers) get(subject string) (*nats.Msg, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.by[subject], a.n[subject]
}

// TestStopUnderLoadAnswersEveryRequest: a worker stopped with every
// handler slot taken and a burst of requests still queued in its client
// answers every one of them before Run returns (the calls in flight with
// their results, the rest "busy" or "shutting down", which processors retry
// elsewhere), and no handler runs after Run returned. The worker's
// connection closes the moment Run returns, as a command's does, so a
// request answered later would never be answered.
func TestStopUnderLoadAnswersEveryRequest(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	const slots, burst = 4, 20000
	var returned atomic.Bool
	var late atomic.Int32
	started := make(chan struct{}, slots)
	release := make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(free)
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("held", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		if returned.Load() {
			late.Add(1)
		}
		started <- struct{}{}
		<-release
		if returned.Load() {
			late.Add(1)
		}
		return pipeline.Result{}, nil
	})
	wc := env.Conn(t, "worker")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := worker.New(ctx, wc, mux, worker.Options{Concurrency: slots})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		err := w.Run(ctx)
		returned.Store(true)
		wc.Close() // as a command's deferred Close does
		done <- err
	}()
	admin := env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "worker up", func() bool {
		_, err := admin.Request("$SRV.PING.worker", nil, 100*time.Millisecond)
		return err == nil
	})

	nc := env.Conn(t, "processor")
	inbox := nc.NewInbox()
	got := collect(t, nc, inbox)
	send := func(i int) {
		data, err := streams.Encode(fnReq(uint64(i+1), "held", 0))
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(streams.WorkSubject("held"))
		m.Reply = inbox + "." + strconv.Itoa(i)
		m.Data = data
		m.Header.Set(streams.HeaderDeadline, itoa(time.Now().Add(20*time.Second).UnixNano()))
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i := range slots {
		send(i)
	}
	for range slots {
		<-started
	}
	for i := slots; i < slots+burst; i++ {
		send(i)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cancel()
	free()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("answered %d of %d", got.count(), slots+burst)
		}
	})
	testnats.Eventually(t, 5*time.Second, "every request answered", func() bool { return got.count() == slots+burst })
	for i := range slots + burst {
		m, n := got.get(inbox + "." + strconv.Itoa(i))
		if n != 1 {
			t.Fatalf("request %d answered %d times", i, n)
		}
		if i >= slots {
			continue
		}
		if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
			t.Fatalf("call %d in flight at stop: answered %s %s, want its result", i, code, m.Header.Get(micro.ErrorHeader))
		}
		if rep, err := streams.Decode[streams.WorkReply](m.Data); err != nil || rep.Error != nil {
			t.Fatalf("call %d in flight at stop: %+v, %v", i, rep, err)
		}
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d handler runs started or ended after Run returned", n)
	}
}
