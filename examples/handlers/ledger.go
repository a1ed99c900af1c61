package handlers

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/tickflow/tickflow/pipeline"
)

// Transfer is the payload of ledger.transfer.
type Transfer struct {
	From   string `msgpack:"from"`
	To     string `msgpack:"to"`
	Amount int64  `msgpack:"amount"`
}

// Ledger is an in-memory set of balances with real effects: transfers move
// money, and an atomic unit's failure moves it back (Compensate). Each
// transfer is applied at most once per idempotency key.
//
// A transfer moves money only from its submitter's own account (From must be
// pipeline.Call.Submitter), unless the batch's label is one of the ledger's
// operator labels: the authorization table decides who may submit under
// those (a back office, say), and their batches may move anyone's money.
type Ledger struct {
	mu        sync.Mutex
	balances  map[string]int64
	applied   map[string]Transfer
	operators []string
}

// NewLedger returns a ledger with the given opening balances. Batches under
// operatorLabels may transfer from any account; by default none may, and
// every transfer must come from its submitter's own account.
func NewLedger(balances map[string]int64, operatorLabels ...string) *Ledger {
	l := &Ledger{balances: map[string]int64{}, applied: map[string]Transfer{}, operators: slices.Clone(operatorLabels)}
	for k, v := range balances {
		l.balances[k] = v
	}
	slices.Sort(l.operators)
	return l
}

// Balance returns an account's balance.
func (l *Ledger) Balance(account string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balances[account]
}

// Handle applies a transfer. A transfer from another's account
// (ErrForeignAccount) and insufficient funds (ErrInsufficientFunds) are
// permanent.
func (l *Ledger) Handle(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var t Transfer
	if err := call.Payload.Decode(&t); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	if t.Amount <= 0 || t.From == "" || t.To == "" {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("handlers: transfer needs from, to and an amount > 0 (got from %.64q, to %.64q, amount %d)", t.From, t.To, t.Amount))
	}
	if err := l.authorize(call, t); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := call.IdempotencyKey()
	if _, done := l.applied[key]; done {
		return pipeline.Result{Data: pipeline.MustPayload(l.balances[t.From])}, nil
	}
	if l.balances[t.From] < t.Amount {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("%w: %.64s has %d, needs %d", ErrInsufficientFunds, t.From, l.balances[t.From], t.Amount))
	}
	l.balances[t.From] -= t.Amount
	l.balances[t.To] += t.Amount
	l.applied[key] = t
	return pipeline.Result{Data: pipeline.MustPayload(l.balances[t.From])}, nil
}

// authorize lets the submitter move its own money, and an operator label
// anyone's.
func (l *Ledger) authorize(call *pipeline.Call, t Transfer) error {
	if call.Submitter != "" && t.From == call.Submitter {
		return nil
	}
	if _, ok := slices.BinarySearch(l.operators, call.Label); ok {
		return nil
	}
	return fmt.Errorf("%w: %.64q may transfer only from its own account, not from %.64q (label %.64q; labels that may move anyone's money: %q)",
		ErrForeignAccount, call.Submitter, t.From, call.Label, l.operators)
}

// Compensate undoes a transfer this ledger applied.
func (l *Ledger) Compensate(_ context.Context, call *pipeline.Call, _ pipeline.Result) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := call.IdempotencyKey()
	t, ok := l.applied[key]
	if !ok {
		return nil
	}
	l.balances[t.From] += t.Amount
	l.balances[t.To] -= t.Amount
	delete(l.applied, key)
	return nil
}
