// Package handlers holds example handlers that make the demo meaningful: a
// ledger whose transfers are undone when an atomic unit fails, an HTTP call,
// a deliberately flaky function, and functions that always fail, with a
// fallback. They are examples, not part of tickflow's core.
package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// Function types registered by Register.
const (
	TypeTransfer = "ledger.transfer"
	TypeHTTP     = "http.post"
	TypeFlaky    = "flaky"
	TypeFail     = "fail"
	TypeNoop     = "noop"
)

// Register adds the example handlers to mux, with l as the ledger.
func Register(mux *pipeline.ServeMux, l *Ledger) {
	mux.Register(TypeTransfer, l)
	mux.Register(TypeHTTP, &HTTP{Client: &http.Client{Timeout: 5 * time.Second}})
	mux.RegisterFunc(TypeFlaky, Flaky)
	mux.RegisterFunc(TypeFail, Fail)
	mux.RegisterFallback(TypeFail, pipeline.FallbackFunc(FailFallback))
	mux.RegisterFunc(TypeNoop, func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
}

// ErrInsufficientFunds is a permanent failure of a transfer.
var ErrInsufficientFunds = errors.New("handlers: insufficient funds")

// Transfer is the payload of ledger.transfer.
type Transfer struct {
	From   string `msgpack:"from"`
	To     string `msgpack:"to"`
	Amount int64  `msgpack:"amount"`
}

// Ledger is an in-memory set of balances with real effects: transfers move
// money, and an atomic unit's failure moves it back (Compensate). Each
// transfer is applied at most once per idempotency key.
type Ledger struct {
	mu       sync.Mutex
	balances map[string]int64
	applied  map[string]Transfer
}

// NewLedger returns a ledger with the given opening balances.
func NewLedger(balances map[string]int64) *Ledger {
	l := &Ledger{balances: map[string]int64{}, applied: map[string]Transfer{}}
	for k, v := range balances {
		l.balances[k] = v
	}
	return l
}

// Balance returns an account's balance.
func (l *Ledger) Balance(account string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.balances[account]
}

// Handle applies a transfer. Insufficient funds is permanent.
func (l *Ledger) Handle(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var t Transfer
	if err := call.Payload.Decode(&t); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	if t.Amount <= 0 || t.From == "" || t.To == "" {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("handlers: transfer needs from, to and an amount > 0 (got %+v)", t))
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	key := call.IdempotencyKey()
	if _, done := l.applied[key]; done {
		return pipeline.Result{Data: pipeline.MustPayload(l.balances[t.From])}, nil
	}
	if l.balances[t.From] < t.Amount {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("%w: %s has %d, needs %d", ErrInsufficientFunds, t.From, l.balances[t.From], t.Amount))
	}
	l.balances[t.From] -= t.Amount
	l.balances[t.To] += t.Amount
	l.applied[key] = t
	return pipeline.Result{Data: pipeline.MustPayload(l.balances[t.From])}, nil
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

// HTTPRequest is the payload of http.post.
type HTTPRequest struct {
	URL  string `msgpack:"url"`
	Body string `msgpack:"body"`
}

// HTTP posts a body to a URL. 5xx and transport errors are retryable; 4xx
// are permanent. The idempotency key goes in the Idempotency-Key header.
type HTTP struct{ Client *http.Client }

// Handle performs the request.
func (h *HTTP) Handle(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var r HTTPRequest
	if err := call.Payload.Decode(&r); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewBufferString(r.Body))
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", call.IdempotencyKey())
	resp, err := h.Client.Do(req)
	if err != nil {
		return pipeline.Result{}, pipeline.WithCode("http.transport", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 500:
		return pipeline.Result{}, pipeline.WithCode("http.5xx", fmt.Errorf("handlers: POST %s: %s", r.URL, resp.Status))
	case resp.StatusCode >= 400:
		return pipeline.Result{}, pipeline.Permanent(pipeline.WithCode("http.4xx", fmt.Errorf("handlers: POST %s: %s", r.URL, resp.Status)))
	}
	return pipeline.Result{Data: pipeline.MustPayload(map[string]any{"status": resp.StatusCode, "body": string(body)})}, nil
}

// FlakyArgs is the payload of flaky.
type FlakyArgs struct {
	// FailAttempts is how many attempts fail before one succeeds.
	FailAttempts int `msgpack:"fail_attempts"`
}

// Flaky fails its first FailAttempts attempts, then succeeds.
func Flaky(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var a FlakyArgs
	if err := call.Payload.Decode(&a); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	if call.Attempt <= a.FailAttempts {
		return pipeline.Result{}, pipeline.WithCode("flaky", fmt.Errorf("handlers: flaky attempt %d of %d failing", call.Attempt, a.FailAttempts))
	}
	return pipeline.Result{Data: pipeline.MustPayload(call.Attempt)}, nil
}

// FailArgs is the payload of fail.
type FailArgs struct {
	Permanent bool   `msgpack:"permanent"`
	Code      string `msgpack:"code"`
	// Fallback says whether the fallback succeeds.
	Fallback bool `msgpack:"fallback"`
}

// Fail always fails.
func Fail(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var a FailArgs
	if err := call.Payload.Decode(&a); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	err := fmt.Errorf("handlers: fail on attempt %d", call.Attempt)
	if a.Code != "" {
		err = pipeline.WithCode(a.Code, err)
	}
	if a.Permanent {
		err = pipeline.Permanent(err)
	}
	return pipeline.Result{}, err
}

// FailFallback handles a failed fail call when its payload says so.
func FailFallback(_ context.Context, call *pipeline.Call, f pipeline.Failure) (pipeline.Result, error) {
	var a FailArgs
	if err := call.Payload.Decode(&a); err != nil {
		return pipeline.Result{}, err
	}
	if !a.Fallback {
		return pipeline.Result{}, fmt.Errorf("handlers: fallback declined after %d failures: %s", f.Failures, f.LastError)
	}
	return pipeline.Result{Data: pipeline.MustPayload("handled by fallback")}, nil
}
