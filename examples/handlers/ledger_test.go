package handlers_test

import (
	"context"
	"errors"
	"testing"

	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/pipeline"
)

// TestLedgerMovesOnlyTheSubmittersMoney: a transfer's source is the
// submitter's own account, unless the batch's label is an operator label.
func TestLedgerMovesOnlyTheSubmittersMoney(t *testing.T) {
	tests := []struct {
		name      string
		submitter string
		label     string
		from      string
		allowed   bool
	}{
		{name: "alice from alice", submitter: "alice", label: "transfer", from: "alice", allowed: true},
		{name: "alice from bob", submitter: "alice", label: "transfer", from: "bob"},
		{name: "no submitter (enqueued without authz)", label: "transfer", from: "alice"},
		{name: "an operator label from anyone", submitter: "carol", label: "back-office", from: "bob", allowed: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := handlers.NewLedger(map[string]int64{"alice": 100, "bob": 100}, "back-office")
			call := &pipeline.Call{BatchID: uint64(i + 1), Submitter: tt.submitter, Label: tt.label,
				Payload: pipeline.MustPayload(handlers.Transfer{From: tt.from, To: "dave", Amount: 30})}
			_, err := l.Handle(context.Background(), call)
			if tt.allowed {
				if err != nil || l.Balance(tt.from) != 70 || l.Balance("dave") != 30 {
					t.Fatalf("err %v; %s has %d, dave %d, want 70 and 30", err, tt.from, l.Balance(tt.from), l.Balance("dave"))
				}
				return
			}
			if !errors.Is(err, handlers.ErrForeignAccount) || !pipeline.IsPermanent(err) {
				t.Fatalf("err %v, want a permanent %v", err, handlers.ErrForeignAccount)
			}
			if l.Balance(tt.from) != 100 || l.Balance("dave") != 0 {
				t.Fatalf("a refused transfer moved money: %s has %d, dave %d", tt.from, l.Balance(tt.from), l.Balance("dave"))
			}
		})
	}
}
