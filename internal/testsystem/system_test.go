package testsystem_test

import (
	"context"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// TestStartRunsABatch: a system started with the jobs table, a worker
// and a processor runs alice's batch through authz to its callback, each
// function counted once, and Settled and Outcome agree on it.
func TestStartRunsABatch(t *testing.T) {
	mux := pipeline.NewServeMux()
	calls := testsystem.Count(mux)
	mux.RegisterFunc("noop", func(context.Context, *pipeline.Call) (pipeline.Result, error) { return pipeline.Result{}, nil })
	sys := testsystem.Start(t, testsystem.JobsTable, testsystem.Options{Handlers: mux, Processor: &processor.Options{}})
	// authz applies the callback, and CALLBACKS lets it go then: keep it
	// for Outcome to read.
	testnats.KeepCallbacks(t, sys.Admin)
	rep, err := sys.Client(t, "alice", client.Config{}).Send(sys.Ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{{Type: "noop"}, {Type: "noop"}}})
	if err != nil {
		t.Fatal(err)
	}
	if rec := sys.Settled(t, sys.Proc, rep.ID); rec.Status != pipeline.Executed {
		t.Fatalf("record %+v, want Executed", rec)
	}
	if cb := sys.Outcome(t, sys.Proc, rep.ID); cb.Outcome.Status != pipeline.Executed || cb.BatchID != rep.ID {
		t.Fatalf("callback %+v, want batch %d Executed", cb, rep.ID)
	}
	if n := calls.Total(); n != 2 {
		t.Fatalf("%d executions, want one per function: 2", n)
	}
}
