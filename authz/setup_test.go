package authz_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
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

// bundle is a server with authz (owner "owner"), a worker serving the
// example handlers, counted, and a processor of domain pay ticked by the
// test.
type bundle struct {
	*testsystem.System
	env    *testnats.Env
	ctx    context.Context
	svc    *authz.Service
	stop   func()
	calls  counter
	ledger *handlers.Ledger
	proc   *processor.Processor
}

// counter counts the handler executions per idempotency key, and keeps
// the last Call.Payload each got.
type counter struct{ *testsystem.Counter }

func (c counter) get(k string) int { return c.Get(k) }

func setup(t *testing.T, opts ...testnats.Option) *bundle {
	t.Helper()
	b, mux := newBundle()
	b.start(t, tableYAML, mux, &processor.Options{}, opts...)
	return b
}

// setupOn is setup on env's server, which the test started (or restarted)
// itself.
func setupOn(t *testing.T, env *testnats.Env) *bundle {
	t.Helper()
	b, mux := newBundle()
	b.System = testsystem.StartOn(t, env, tableYAML, testsystem.Options{Handlers: mux, Processor: &processor.Options{}})
	b.env, b.ctx, b.svc, b.stop, b.proc = b.Env, b.Ctx, b.Authz, b.StopAuthz, b.Proc
	return b
}

// newBundle is a bundle with its ledger (alice has 100) and a mux serving
// the example handlers, counted.
func newBundle() (*bundle, *pipeline.ServeMux) {
	b := &bundle{ledger: handlers.NewLedger(map[string]int64{"alice": 100})}
	mux := pipeline.NewServeMux()
	b.calls = counter{testsystem.Count(mux)}
	handlers.Register(mux, b.ledger, nil)
	return b, mux
}

// start starts the system: authz with table, a worker serving mux, and,
// with procOpts, a processor (the settings' ack wait 1 s, then opts).
func (b *bundle) start(t *testing.T, table string, mux *pipeline.ServeMux, procOpts *processor.Options, opts ...testnats.Option) {
	t.Helper()
	b.System = testsystem.Start(t, table, testsystem.Options{
		NATS:     append([]testnats.Option{testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second })}, opts...),
		Handlers: mux, Processor: procOpts,
	})
	b.env, b.ctx, b.svc, b.stop, b.proc = b.Env, b.Ctx, b.Authz, b.StopAuthz, b.Proc
}

// startAuthz runs an authz replica; b.stop stops it.
func (b *bundle) startAuthz(t *testing.T) { b.runAuthz(t, authz.Options{}) }

// runAuthz runs an authz replica with opts, the bundle's owner and (unless
// opts names one) its table; b.stop stops it.
func (b *bundle) runAuthz(t *testing.T, opts authz.Options) {
	t.Helper()
	opts.Owner = "owner"
	b.RunAuthz(t, opts)
	b.svc, b.stop = b.Authz, b.StopAuthz
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

// conn is the bundle's one connection as user.
func (b *bundle) conn(t *testing.T, user string) *nats.Conn {
	if b.System == nil { // a bundle around a server the test started itself
		b.System = testsystem.Attach(b.ctx, t, b.env, domain)
	}
	return b.Conn(t, user)
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
	return answeredUnless(t, what, testsystem.Retryable, f)
}

// answeredRead is answered for a read, which is also asked again when no
// answer comes: a replica killed a moment before may still have been
// handed it, as it would be any caller's, and a read is safe to repeat.
func answeredRead[R any](t *testing.T, what string, f func() (*R, error)) *R {
	t.Helper()
	return answeredUnless(t, what, func(err error) bool {
		return testsystem.Retryable(err) || errors.Is(err, client.ErrNoAnswer)
	}, f)
}

// answeredUnless calls f until its error is not one retry takes, and fails
// the test on any error left.
func answeredUnless[R any](t *testing.T, what string, retry func(error) bool, f func() (*R, error)) *R {
	t.Helper()
	var rep *R
	var err error
	testnats.Eventually(t, 10*time.Second, "authz answers "+what, func() bool {
		rep, err = f()
		return !retry(err)
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return rep
}

func noop() api.CallSpec { return api.CallSpec{Type: handlers.TypeNoop} }

func (b *bundle) record(t *testing.T, id uint64) *api.BatchRecord {
	t.Helper()
	return b.Record(t, id)
}

// settled ticks the processor until the batch's record is terminal.
func (b *bundle) settled(t *testing.T, id uint64) *api.BatchRecord {
	t.Helper()
	return b.Settled(t, b.proc, id)
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

func equal(a, b []uint64) bool { return slices.Equal(a, b) }

func nats_ErrorHandler(errs chan<- error) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})
}
