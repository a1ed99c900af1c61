// Package e2e_test runs the underwriting processors as the functions of
// real batches: a real server, authz's enqueue, a processor ticked by the
// test, and workers serving the steps handlers over the runs bucket.
package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
	"github.com/tickflow/tickflow/x/steps"
	"github.com/tickflow/tickflow/x/steps/kvstore"
)

const (
	domain = "uw"
	// subject is the underwriting every batch is about.
	subject = "UW-123"
	// ein is the application's EIN, normalised.
	ein = "123456789"
)

// bundle is a real server, provisioned for domain, with a processor.
type bundle struct {
	*testsystem.System
	env   *testnats.Env
	admin jetstream.JetStream
	authz jetstream.JetStream
	proc  *processor.Processor
	ctx   context.Context
}

func setup(t *testing.T) *bundle {
	t.Helper()
	sys := testsystem.Start(t, "", testsystem.Options{
		Domains:   []string{domain},
		NATS:      []testnats.Option{testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second })},
		Processor: &processor.Options{WorkTimeout: 5 * time.Second},
	})
	return &bundle{System: sys, env: sys.Env, admin: sys.Admin, authz: sys.AuthzJS, proc: sys.Proc, ctx: sys.Ctx}
}

// workerProcess is what survives of a worker process in memory: its own
// connection, run store, runners and worker. Only the KV state is shared
// between two of them.
type workerProcess struct {
	runners *underwriting.Runners
	stop    func()
}

// startWorker starts a worker named name serving the underwriting handlers
// with ps over a RunStore of its own connection, and waits until its
// endpoints answer. It stops when the test ends, if not stopped before.
func (b *bundle) startWorker(t *testing.T, name string, ps underwriting.Processors) *workerProcess {
	t.Helper()
	nc := b.env.Conn(t, "worker")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	store, err := kvstore.New(b.ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	mux := pipeline.NewServeMux()
	runners, err := underwriting.Register(mux, store, ps)
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(b.ctx, nc, mux, worker.Options{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel() // before waiting: Run returns only once its context ends
			if err := <-done; err != nil {
				t.Errorf("worker %s: Run: %v", name, err)
			}
			nc.Close()
		})
	}
	t.Cleanup(stop)

	// The service's INFO lists an endpoint only once it is subscribed, and
	// names the worker: this one is serving every type.
	admin := b.env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "worker "+name+" endpoints", func() bool {
		msg, err := admin.Request("$SRV.INFO."+streams.WorkerService, nil, 100*time.Millisecond)
		if err != nil {
			return false
		}
		var info micro.Info
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.Metadata["name"] != name {
			return false
		}
		for _, typ := range mux.Types() {
			if !slices.ContainsFunc(info.Endpoints, func(e micro.EndpointInfo) bool { return e.Subject == streams.WorkSubject(typ) }) {
				return false
			}
		}
		return true
	})
	return &workerProcess{runners: runners, stop: stop}
}

// enqueue submits a non-atomic batch of functions the way authz does.
func (b *bundle) enqueue(t *testing.T, functions ...pipeline.Function) uint64 {
	t.Helper()
	bt := pipeline.Batch{
		Domain: domain, Priority: pipeline.Med,
		Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions:  functions,
	}
	return b.Enqueue(t, &bt)
}

// tickUntil ticks the processor one step at a time until cond holds.
func (b *bundle) tickUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testnats.Eventually(t, 15*time.Second, what, func() bool {
		if cond() {
			return true
		}
		if rep := b.proc.Tick(b.ctx, 1); rep.Status == api.TickError {
			t.Fatalf("tick: %s", rep.Error)
		}
		return false
	})
}

// outcome ticks until the batch's callback is in CALLBACKS and returns it.
func (b *bundle) outcome(t *testing.T, id uint64) records.Callback {
	t.Helper()
	var cb records.Callback
	b.tickUntil(t, fmt.Sprintf("callback of batch %d", id), func() bool {
		var ok bool
		cb, ok = b.Callback(t, id)
		return ok
	})
	return cb
}

// deadLetters returns the DLQ's entries.
func (b *bundle) deadLetters(t *testing.T) []records.DeadLetter {
	t.Helper()
	return b.DeadLetters(t)
}

// progress returns the batch's progress record, and whether there is one.
func (b *bundle) progress(t *testing.T, id uint64) (records.Progress, bool) {
	t.Helper()
	return b.Progress(t, id)
}

// processors are the underwriting processors with the report's faults.
func processors(reportFaults *underwriting.Faults) underwriting.Processors {
	return underwriting.Processors{
		ClearBusinessReport: &underwriting.ClearBusinessReport{
			Records: underwriting.StaticRecords{ein: {UCCFilings: 1}},
			Faults:  reportFaults,
		},
	}
}

// document is a function whose payload carries one stipulation.
func document(t *testing.T, typ, name string, content any, retry *pipeline.RetryLogic) pipeline.Function {
	t.Helper()
	raw, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	req := steps.Request{SubjectID: subject, Stipulations: []steps.Document{{Name: name, Content: raw}}}
	return pipeline.Function{Type: typ, Payload: pipeline.MustPayload(req), Retry: retry}
}

func applicationForm(t *testing.T, ein string, retry *pipeline.RetryLogic) pipeline.Function {
	return document(t, underwriting.TypeApplicationForm, "s_application_form", map[string]any{
		"business_name": "ACME Corp", "business_ein": ein, "requested_amount": 50000,
		"years_in_business": 3, "industry": "retail",
	}, retry)
}

func bankStatement(t *testing.T) pipeline.Function {
	return document(t, underwriting.TypeBankStatement, "s_bank_statement", map[string]any{
		"account_holder": "Acme, Inc.",
		"months":         []map[string]any{{"month": "2025-07", "deposits": 40000, "ending_balance": 2500}},
	}, nil)
}

// businessReport needs no document: its inputs are the earlier results.
func businessReport(retry *pipeline.RetryLogic) pipeline.Function {
	return pipeline.Function{
		Type:    underwriting.TypeClearBusinessReport,
		Payload: pipeline.MustPayload(steps.Request{SubjectID: subject}),
		Retry:   retry,
	}
}

func fixedRetry(times int, every time.Duration) *pipeline.RetryLogic {
	return &pipeline.RetryLogic{Times: pipeline.Times(times), Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(every)}}
}

// runs returns how many times r started each step, in pipeline order.
func runs(r *steps.Runner) [4]int64 {
	return [4]int64{r.Runs(steps.StepDependency), r.Runs(steps.StepValidation), r.Runs(steps.StepProcessing), r.Runs(steps.StepExtraction)}
}
