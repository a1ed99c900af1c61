package local_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/local"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

const table = `
labels:
  invoices:
    domain: billing
    users: [alice]
    mode: atomic
    priority: med
    functions: {invoice: {}}
  reports:
    domain: reporting
    users: [alice]
    mode: atomic
    priority: high
    functions: {invoice: {}}
`

func invoices() *pipeline.ServeMux {
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("invoice", func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload("INV-" + call.Submitter)}, nil
	})
	return mux
}

// send sends one invoice under label as alice, retrying while authz starts.
func send(t *testing.T, ctx context.Context, c *client.Client, label string) *api.SendReply {
	t.Helper()
	req := api.SendRequest{Label: label, Functions: api.Calls{{Type: "invoice"}}}
	var sent *api.SendReply
	testnats.Eventually(t, 10*time.Second, "authz answering", func() bool {
		var err error
		sent, err = c.Send(ctx, req)
		if err != nil && !errors.Is(err, client.ErrNotRunning) {
			t.Fatalf("send: %v", err)
		}
		return err == nil
	})
	return sent
}

// A processor runs for every domain of the table, in the ready pace: both
// labels' batches finish without a tick. Close stops everything and
// removes the store directory Start made.
func TestStartRunsEveryDomain(t *testing.T) {
	ctx := t.Context()
	sys, err := local.Start(ctx, local.Options{Table: []byte(table), Mux: invoices()})
	if err != nil {
		t.Fatal(err)
	}
	alice, err := sys.Client("alice", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, label := range []string{"invoices", "reports"} {
		sent := send(t, ctx, alice, label)
		rep, err := alice.Wait(ctx, sent.ID)
		if err != nil {
			t.Fatal(err)
		}
		var out string
		if err := rep.Outputs[0].Data.Decode(&out); err != nil || rep.Record.Status != pipeline.Executed || out != "INV-alice" {
			t.Fatalf("%s: %s, output %q (%v)", label, rep.Record.Status, out, err)
		}
	}
	dirs := func() []string {
		m, _ := os.ReadDir(os.TempDir())
		var ds []string
		for _, e := range m {
			if strings.HasPrefix(e.Name(), "tickflow-local-") {
				ds = append(ds, e.Name())
			}
		}
		return ds
	}
	before := len(dirs())
	if err := sys.Close(); err != nil {
		t.Fatal(err)
	}
	if after := len(dirs()); after != before-1 {
		t.Fatalf("store directories: %d before Close, %d after", before, after)
	}
}

// In the tick pace a batch waits in its queue until System.Tick; a tick of
// a domain the table does not name is an error that says which it names.
// A store directory of the caller's survives Close.
func TestTickPace(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	sys, err := local.Start(ctx, local.Options{Table: []byte(table), Mux: invoices(), Pace: processor.PaceTick, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sys.Close() }()
	alice, err := sys.Client("alice", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sent := send(t, ctx, alice, "invoices")
	rep, err := alice.Batch(ctx, api.IDRequest{ID: sent.ID})
	if err != nil || rep.Record.Status.Terminal() {
		t.Fatalf("before a tick: %v, %v", rep, err)
	}
	if _, err := sys.Tick(ctx, "shipping", 1); err == nil || !strings.Contains(err.Error(), "[billing reporting]") {
		t.Fatalf("tick of an unknown domain: %v", err)
	}
	// A tick fetches without waiting: one that comes before the queue's
	// consumer has seen the token (just stored, under load) finds none,
	// and the next one takes it.
	testnats.Eventually(t, 10*time.Second, "a tick that runs the batch", func() bool {
		tr, err := sys.Tick(ctx, "billing", 1)
		if err != nil || len(tr.Steps) > 1 || len(tr.Steps) == 0 && tr.Status != api.TickNoMessages {
			t.Fatalf("tick: %+v, %v", tr, err)
		}
		return len(tr.Steps) == 1
	})
	if rep, err := alice.Wait(ctx, sent.ID); err != nil || rep.Record.Status != pipeline.Executed {
		t.Fatalf("after a tick: %v, %v", rep, err)
	}
	if err := sys.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the caller's store directory: %v", err)
	}
}

// Bad options are refused with what was wrong, and nothing is left
// running (goleak checks).
func TestStartRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		o    local.Options
		want string
	}{
		"no mux":    {local.Options{Table: []byte(table)}, "Options.Mux is required"},
		"bad table": {local.Options{Table: []byte("labels:\n  x: {domain: billing, users: [alice]}\n"), Mux: invoices()}, "labels.x"},
	} {
		t.Run(name, func(t *testing.T) {
			sys, err := local.Start(t.Context(), tc.o)
			if err == nil {
				_ = sys.Close()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to mention %q", err, tc.want)
			}
		})
	}
}
