package authz_test

import (
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestCancelledBatchNeverRuns: a batch cancelled before its first step
// never runs, however often its domain ticks: neither an atomic transfer
// (its money stays where it was) nor a one-function non-atomic batch,
// whose first step reads no progress record. Each finishes RemovedByOwner
// with exactly one callback.
func TestCancelledBatchNeverRuns(t *testing.T) {
	b := setup(t)
	testnats.KeepCallbacks(t, b.env.JS(t, "admin"))
	for _, tc := range []struct {
		name, label string
		call        api.CallSpec
	}{
		{name: "atomic", label: "transfer", call: api.CallSpec{Type: handlers.TypeTransfer,
			Payload: pipeline.MustPayload(handlers.Transfer{From: "alice", To: "bob", Amount: 10})}},
		{name: "one function, non-atomic", label: "jobs", call: noop()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := b.send(t, "alice", tc.label, tc.call)
			var rep api.CancelReply
			if e := b.call(t, "alice", api.OpCancel, api.IDRequest{ID: id}, &rep); e != nil || rep.Status != pipeline.RemovedByOwner {
				t.Fatalf("cancel: %+v %+v", rep, e)
			}
			for range 3 {
				b.proc.Tick(b.ctx, 8)
			}
			rec := b.settled(t, id)
			if rec.Status != pipeline.RemovedByOwner || rec.Outcome.Reason != "cancelled by alice" {
				t.Fatalf("record %+v", rec)
			}
			if n := b.calls.get(key(id)); n != 0 {
				t.Fatalf("the cancelled batch ran %d times", n)
			}
			if got := b.ledger.Balance("alice"); got != 100 {
				t.Fatalf("alice's balance %d after a cancelled transfer, want 100", got)
			}
			if n := len(testnats.Callbacks(t, b.env.JS(t, "admin"))[id]); n != 1 {
				t.Fatalf("%d callbacks, want 1", n)
			}
		})
	}
}
