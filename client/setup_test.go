package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
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

const tableYAML = testsystem.JobsTable + `  units:
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
	*testsystem.System
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
	mux := pipeline.NewServeMux()
	handlers.Register(mux, handlers.NewLedger(nil), nil)
	sys := testsystem.Start(t, tableYAML, testsystem.Options{
		NATS:      append([]testnats.Option{testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second })}, opts...),
		TableFile: true, Handlers: mux, Processor: &processor.Options{},
	})
	b := &bundle{System: sys, env: sys.Env, ctx: sys.Ctx, table: sys.TablePath, proc: sys.Proc}
	b.alice, b.bob, b.oracle, b.owner = b.client(t, "alice"), b.client(t, "bob"), b.client(t, "oracle"), b.client(t, "owner")
	return b
}

// client connects as user and returns its client.
func (b *bundle) client(t *testing.T, user string) *client.Client {
	t.Helper()
	return b.Client(t, user, client.Config{})
}

// settled ticks the processor until batch id's record is terminal, read
// by the owner.
func (b *bundle) settled(t *testing.T, id uint64) *api.BatchRecord {
	t.Helper()
	return b.Settled(t, b.proc, id)
}

func noop() api.CallSpec { return api.CallSpec{Type: handlers.TypeNoop} }

// flaky succeeds at once, its output its attempt: 1.
func flaky() api.CallSpec {
	return api.CallSpec{Type: handlers.TypeFlaky, Payload: pipeline.MustPayload(handlers.FlakyArgs{})}
}

func fail() api.CallSpec {
	return api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})}
}
