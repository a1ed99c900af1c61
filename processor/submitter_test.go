package processor_test

import (
	"strings"
	"testing"

	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestHandlersSeeTheSubmitter: the processor hands each function's handler
// the batch's submitter and label, so a handler can authorize the call. The
// example ledger lets alice move her own money and refuses her a transfer
// from bob's account, atomic or not.
func TestHandlersSeeTheSubmitter(t *testing.T) {
	modes := []pipeline.Mode{pipeline.Atomic, pipeline.NonAtomic}
	for _, mode := range modes {
		t.Run(string(mode), func(t *testing.T) {
			b := setup(t)
			p := b.processor(t, processor.Options{})
			// An operator gives bob something alice could take.
			if cb := b.outcome(t, p, b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{
				fn(handlers.TypeTransfer, handlers.Transfer{From: "alice", To: "bob", Amount: 40}),
			}})); cb.Outcome.Status != pipeline.Executed {
				t.Fatalf("operator's transfer: %s", cb.Outcome)
			}
			tests := []struct {
				name   string
				from   string
				want   pipeline.Status
				reason string
			}{
				{name: "alice from alice", from: "alice", want: pipeline.Executed},
				{name: "alice from bob", from: "bob", want: pipeline.Rejected, reason: `"alice" may transfer only from its own account, not from "bob"`},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					id := b.enqueue(t, pipeline.Batch{Submitter: "alice", Label: "transfer", Subroutine: pipeline.Subroutine{Mode: mode},
						Functions: []pipeline.Function{fn(handlers.TypeTransfer, handlers.Transfer{From: tt.from, To: "carol", Amount: 10})}})
					cb := b.outcome(t, p, id)
					if cb.Outcome.Status != tt.want || !strings.Contains(cb.Outcome.Reason, tt.reason) {
						t.Fatalf("outcome %s (%s), want %s with %q", cb.Outcome, cb.Outcome.Reason, tt.want, tt.reason)
					}
				})
			}
			if a, bo, c := b.ledger.Balance("alice"), b.ledger.Balance("bob"), b.ledger.Balance("carol"); a != 50 || bo != 40 || c != 10 {
				t.Fatalf("balances: alice %d bob %d carol %d, want 50 40 10", a, bo, c)
			}
		})
	}
}
