// Package handlers holds example handlers that make the demo meaningful: a
// ledger whose transfers are undone when an atomic unit fails, an HTTP call,
// a deliberately flaky function, and functions that always fail, with a
// fallback. They are examples, not part of tickflow's core, but they show
// how a handler authorizes what it does: the ledger moves only the
// submitter's own money (pipeline.Call.Submitter, Call.Label), and the HTTP
// call reaches only the destinations its configuration opens.
package handlers

import (
	"context"
	"fmt"

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

// Register adds the example handlers to mux, with l as the ledger and h as
// http.post; a nil h is NewHTTP() with nothing opened, which reaches public
// addresses only.
func Register(mux *pipeline.ServeMux, l *Ledger, h *HTTP) {
	if h == nil {
		h, _ = NewHTTP() // no allow entries: nothing to reject
	}
	mux.Register(TypeTransfer, l)
	mux.Register(TypeHTTP, h)
	mux.RegisterFunc(TypeFlaky, Flaky)
	mux.RegisterFunc(TypeFail, Fail)
	mux.RegisterFallback(TypeFail, pipeline.FallbackFunc(FailFallback))
	mux.RegisterFunc(TypeNoop, func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
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
