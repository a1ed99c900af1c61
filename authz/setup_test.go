package authz_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/streams"
	"github.com/tickflow/tickflow/worker"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

const domain = "pay"

const tableYAML = `
labels:
  transfer:
    domain: pay
    users: [alice]
    mode: atomic
    priority: high
    retry: {times: 1, backoff: {kind: fixed, initial: 10ms}}
    functions:
      noop: {}
      ledger.transfer: {}
      fail: {}
  jobs:
    domain: pay
    users: ["*"]
    mode: non_atomic
    priority: med
    functions:
      noop: {}
      fail: {}
      flaky: {retry: {times: 3, backoff: {kind: fixed, initial: 10ms}}}
  limited:
    domain: pay
    users: [alice, bob]
    mode: atomic
    priority: med
    max_concurrent: 2
    functions:
      noop: {}
  confirmed:
    domain: pay
    users: [alice, bob]
    mode: non_atomic
    priority: med
    functions:
      noop: {confirm: {timeout: 1m, by: [oracle]}}
      flaky: {}
`

type bundle struct {
	env    *testnats.Env
	ctx    context.Context
	svc    *authz.Service
	stop   func()
	calls  *counter
	ledger *handlers.Ledger
	proc   *processor.Processor
	// payloads holds the last Call.Payload each function's handler got, by
	// idempotency key.
	payloads sync.Map
}

type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(k string) { c.mu.Lock(); c.n[k]++; c.mu.Unlock() }
func (c *counter) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[k]
}

func setup(t *testing.T, opts ...testnats.Option) *bundle {
	t.Helper()
	opts = append([]testnats.Option{testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second })}, opts...)
	return setupOn(t, testnats.Start(t, []string{domain}, opts...))
}

// setupOn runs authz, a worker and a processor on env's server.
func setupOn(t *testing.T, env *testnats.Env) *bundle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &bundle{env: env, ctx: ctx, calls: &counter{n: map[string]int{}}, ledger: handlers.NewLedger(map[string]int64{"alice": 100})}
	b.startAuthz(t)
	mux := pipeline.NewServeMux()
	mux.Use(func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, c *pipeline.Call) (pipeline.Result, error) {
			b.calls.add(c.IdempotencyKey())
			b.payloads.Store(c.IdempotencyKey(), c.Payload)
			return next.Handle(ctx, c)
		})
	})
	handlers.Register(mux, b.ledger, nil)
	w, err := worker.New(ctx, env.Conn(t, "worker"), mux, worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); testnats.Stopped(t, "worker", wdone) })
	b.proc, err = processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: domain})
	if err != nil {
		t.Fatal(err)
	}
	admin := env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "services up", func() bool {
		_, e1 := admin.Request("$SRV.PING.worker", nil, 100*time.Millisecond)
		_, e2 := admin.Request("$SRV.PING.authz", nil, 100*time.Millisecond)
		return e1 == nil && e2 == nil
	})
	return b
}

// startAuthz runs an authz replica; b.stop stops it.
func (b *bundle) startAuthz(t *testing.T) { b.runAuthz(t, authz.Options{}) }

// runAuthz runs an authz replica with opts, the bundle's owner and (unless
// opts names one) its table; b.stop stops it.
func (b *bundle) runAuthz(t *testing.T, opts authz.Options) {
	t.Helper()
	if opts.Table == nil {
		table, err := authz.ParseTable([]byte(tableYAML))
		if err != nil {
			t.Fatal(err)
		}
		opts.Table = table
	}
	opts.Owner = "owner"
	svc, err := authz.New(b.ctx, b.env.Conn(t, "authz"), opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := svc.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	var once sync.Once
	b.svc = svc
	b.stop = func() { once.Do(func() { cancel(); testnats.Stopped(t, "authz", done) }) }
	t.Cleanup(b.stop)
}

// apiError is an error reply of the authz service.
type apiError struct {
	Code string
	Msg  string
}

// call sends a JSON request as user and decodes the reply into out.
func (b *bundle) call(t *testing.T, user, op string, req, out any) *apiError {
	t.Helper()
	data, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	m, e := b.raw(t, user, op, data)
	if e != nil {
		return e
	}
	if out != nil {
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("%s %s: reply %s: %v", user, op, m.Data, err)
		}
	}
	return nil
}

// raw sends body as it is as user's request op, and returns the reply or
// its error.
func (b *bundle) raw(t *testing.T, user, op string, data []byte) (*nats.Msg, *apiError) {
	t.Helper()
	nc := b.conn(t, user)
	var m *nats.Msg
	var err error
	testnats.Eventually(t, 10*time.Second, "authz answers "+op, func() bool {
		m, err = nc.Request(streams.AuthzSubject(user, op), data, 2*time.Second)
		return err != nats.ErrNoResponders
	})
	if err != nil {
		t.Fatalf("%s %s: %v", user, op, err)
	}
	if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &apiError{Code: code, Msg: m.Header.Get(micro.ErrorHeader)}
	}
	return m, nil
}

var conns sync.Map

func (b *bundle) conn(t *testing.T, user string) *nats.Conn {
	key := b.env.Dir + "/" + user
	if nc, ok := conns.Load(key); ok {
		return nc.(*nats.Conn)
	}
	nc := b.env.Conn(t, user)
	conns.Store(key, nc)
	t.Cleanup(func() { conns.Delete(key) })
	return nc
}

func (b *bundle) send(t *testing.T, user, label string, calls ...api.CallSpec) uint64 {
	t.Helper()
	rep := answered(t, "send", func() (*api.SendReply, error) {
		return b.client(t, user).Send(b.ctx, api.SendRequest{Label: label, Functions: calls})
	})
	return rep.ID
}

// client returns the authz client of user, over b.conn.
func (b *bundle) client(t *testing.T, user string) *client.Client {
	t.Helper()
	c, err := client.New(b.conn(t, user), user, client.Config{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// answered calls f until an authz replica answers it (one may be starting
// or stopping), and fails the test on any other error.
func answered[R any](t *testing.T, what string, f func() (*R, error)) *R {
	t.Helper()
	var rep *R
	var err error
	testnats.Eventually(t, 10*time.Second, "authz answers "+what, func() bool {
		rep, err = f()
		return !errors.Is(err, client.ErrNotRunning) && !errors.Is(err, client.ErrUnavailable)
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return rep
}

func noop() api.CallSpec { return api.CallSpec{Type: handlers.TypeNoop} }

func (b *bundle) record(t *testing.T, id uint64) *api.BatchRecord {
	t.Helper()
	return answered(t, "batch", func() (*api.BatchReply, error) {
		return b.client(t, "owner").Batch(b.ctx, api.IDRequest{ID: id})
	}).Record
}

// settled ticks the processor until the batch's record is terminal.
func (b *bundle) settled(t *testing.T, id uint64) *api.BatchRecord {
	t.Helper()
	var rec *api.BatchRecord
	testnats.Eventually(t, 15*time.Second, "batch "+strconv.FormatUint(id, 10)+" settled", func() bool {
		rec = b.record(t, id)
		if rec.Status.Terminal() {
			return true
		}
		b.proc.Tick(b.ctx, 8)
		return false
	})
	return rec
}

func (b *bundle) queue(t *testing.T, p pipeline.Priority) []uint64 {
	t.Helper()
	rep := answered(t, "queue", func() (*api.QueueReply, error) {
		return b.client(t, "owner").Queue(b.ctx, api.QueueRequest{Domain: domain, Priority: p})
	})
	ids := []uint64{}
	for _, it := range rep.Items {
		ids = append(ids, it.ID)
	}
	return ids
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func nats_ErrorHandler(errs chan<- error) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})
}
