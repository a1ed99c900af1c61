package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// batchReads is how many batch requests authz answered so far.
func batchReads(t *testing.T, b *bundle) int {
	t.Helper()
	m, err := b.env.Conn(t, "admin").Request("$SRV.STATS."+streams.AuthzService, nil, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var st micro.Stats
	if err := json.Unmarshal(m.Data, &st); err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Endpoints {
		if e.Name == "batch" {
			return e.NumRequests
		}
	}
	t.Fatal("authz has no batch endpoint")
	return 0
}

// wantOutputs checks that rep holds an Executed outcome and one output of
// flaky (its attempt, 1) per function.
func wantOutputs(t *testing.T, rep *api.BatchReply, n int) {
	t.Helper()
	if rep.Record.Status != pipeline.Executed || len(rep.Outputs) != n {
		t.Fatalf("reply %s with outputs %+v, want Executed with %d", rep.Record.Status, rep.Outputs, n)
	}
	for i, o := range rep.Outputs {
		var attempt int
		if err := o.Data.Decode(&attempt); err != nil || o.Index != i || attempt != 1 {
			t.Fatalf("output %d = %+v (%d, %v), want index %d, data 1", i, o, attempt, err, i)
		}
	}
}

// TestWait: Wait returns the outcome and outputs of a batch that finishes
// after it started (told by authz's announcement: it read the batch
// before any tick) and of one that had finished before it started.
func TestWait(t *testing.T) {
	b := setup(t)
	for _, tc := range []struct {
		name  string
		label string
		calls api.Calls
	}{
		{name: "one function", label: "jobs", calls: api.Calls{flaky()}},
		{name: "two functions", label: "jobs", calls: api.Calls{flaky(), flaky()}},
		{name: "atomic", label: "units", calls: api.Calls{flaky(), flaky()}},
	} {
		t.Run(tc.name+", finishing after", func(t *testing.T) {
			sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: tc.label, Functions: tc.calls})
			if err != nil {
				t.Fatal(err)
			}
			before := batchReads(t, b)
			ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
			defer cancel()
			type result struct {
				rep *api.BatchReply
				err error
			}
			waited := make(chan result, 1)
			go func() {
				rep, err := b.alice.Wait(ctx, sent.ID)
				waited <- result{rep, err}
			}()
			// Nothing ticks until Wait has read the batch, unfinished.
			testnats.Eventually(t, 5*time.Second, "Wait read the batch", func() bool { return batchReads(t, b) > before })
			for {
				select {
				case r := <-waited:
					if r.err != nil {
						t.Fatal(r.err)
					}
					wantOutputs(t, r.rep, len(tc.calls))
					return
				default:
					b.proc.Tick(b.ctx, 8)
				}
			}
		})
		t.Run(tc.name+", finished before", func(t *testing.T) {
			sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: tc.label, Functions: tc.calls})
			if err != nil {
				t.Fatal(err)
			}
			b.settled(t, sent.ID)
			ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
			defer cancel()
			rep, err := b.alice.Wait(ctx, sent.ID)
			if err != nil {
				t.Fatal(err)
			}
			wantOutputs(t, rep, len(tc.calls))
		})
	}
}

// TestWaitRefused: Wait refuses an id of 0, tells another user's batch
// from one that does not exist no better than Batch, refuses the owner a
// batch it did not submit, and returns when its context ends.
func TestWaitRefused(t *testing.T) {
	b := setup(t)
	sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.alice.Wait(b.ctx, 0); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("id 0: %v, want ErrInvalid", err)
	}
	if _, err := b.bob.Wait(b.ctx, sent.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("bob waits for alice's batch: %v, want ErrNotFound", err)
	}
	if _, err := b.owner.Wait(b.ctx, sent.ID); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("the owner waits for alice's batch: %v, want ErrInvalid", err)
	}
	// Nothing ticks: the batch never finishes.
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan error, 1)
	go func() { _, err := b.alice.Wait(ctx, sent.ID); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v, want context.Canceled", err)
	}
}
