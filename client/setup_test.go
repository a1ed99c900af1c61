package client_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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
  jobs:
    domain: pay
    users: [alice, bob]
    mode: non_atomic
    priority: med
    functions:
      noop: {}
      fail: {}
      flaky: {}
  units:
    domain: pay
    users: [alice]
    mode: atomic
    priority: med
    functions:
      flaky: {}
  confirmed:
    domain: pay
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      noop: {confirm: {timeout: 1m, by: [oracle]}}
  capped:
    domain: pay
    users: [bob]
    mode: non_atomic
    priority: med
    max_per_submitter: 1
    functions:
      noop: {}
`

// bundle is a server with authz, a worker and a processor of domain pay,
// and a client per user.
type bundle struct {
	env                       *testnats.Env
	ctx                       context.Context
	table                     string // the authorization table's file
	proc                      *processor.Processor
	alice, bob, oracle, owner *client.Client
}

// setup starts everything; authz runs with owner "owner" and the table
// file b.table.
func setup(t *testing.T, opts ...testnats.Option) *bundle {
	t.Helper()
	opts = append([]testnats.Option{testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second })}, opts...)
	env := testnats.Start(t, []string{domain}, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &bundle{env: env, ctx: ctx, table: filepath.Join(t.TempDir(), "authz.yaml")}
	if err := os.WriteFile(b.table, []byte(tableYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := authz.New(ctx, env.Conn(t, "authz"), authz.Options{Owner: "owner", TablePath: b.table})
	if err != nil {
		t.Fatal(err)
	}
	mux := pipeline.NewServeMux()
	handlers.Register(mux, handlers.NewLedger(nil), nil)
	w, err := worker.New(ctx, env.Conn(t, "worker"), mux, worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.proc, err = processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: domain}); err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = svc.Run(rctx); done <- struct{}{} }()
	go func() { _ = w.Run(rctx); done <- struct{}{} }()
	t.Cleanup(func() { stop(); <-done; <-done })
	b.alice, b.bob, b.oracle, b.owner = b.client(t, "alice"), b.client(t, "bob"), b.client(t, "oracle"), b.client(t, "owner")
	admin := env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "services up", func() bool {
		_, e1 := admin.Request("$SRV.PING.worker", nil, 100*time.Millisecond)
		_, e2 := admin.Request("$SRV.PING.authz", nil, 100*time.Millisecond)
		return e1 == nil && e2 == nil
	})
	return b
}

// client connects as user and returns its client.
func (b *bundle) client(t *testing.T, user string) *client.Client {
	t.Helper()
	c, err := client.New(b.env.Conn(t, user), user, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// settled ticks the processor until batch id's record is terminal, read
// by the owner.
func (b *bundle) settled(t *testing.T, id uint64) *api.BatchRecord {
	t.Helper()
	var rec *api.BatchRecord
	testnats.Eventually(t, 15*time.Second, "batch settled", func() bool {
		rep, err := b.owner.Batch(b.ctx, api.IDRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if rec = rep.Record; rec.Status.Terminal() {
			return true
		}
		b.proc.Tick(b.ctx, 8)
		return false
	})
	return rec
}

func noop() api.CallSpec { return api.CallSpec{Type: handlers.TypeNoop} }

// flaky succeeds at once, its output its attempt: 1.
func flaky() api.CallSpec {
	return api.CallSpec{Type: handlers.TypeFlaky, Payload: pipeline.MustPayload(handlers.FlakyArgs{})}
}

func fail() api.CallSpec {
	return api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})}
}
