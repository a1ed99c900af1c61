package pipeline

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
)

// Call is one execution of one function, as a handler receives it.
type Call struct {
	// BatchID and Index identify the function: the Index-th function of the batch.
	BatchID uint64
	Index   int
	// Domain is the batch's domain.
	Domain string
	// Type is the function type the handler was registered for.
	Type string
	// Payload is the function's argument.
	Payload Payload
	// Key is the batch's serialisation key, if any.
	Key string
	// Submitter is the identity that submitted the batch, as authz learnt it
	// from the connection (never from a message body); empty only for
	// batches enqueued without authz. Handlers authorize with it: a handler
	// that acts on someone's behalf checks that the submitter may.
	Submitter string
	// Label is the authorization label the batch was submitted under; the
	// authorization table decides who may use it, so a handler may grant a
	// label more than the submitter alone may do.
	Label string
	// Attempt counts executions of this function (or atomic unit), from 1.
	Attempt int
	// Round counts the times an effect of this function took place and was
	// then invalidated (its confirmation failed or timed out), from 0. A new
	// round asks for the effect again, so it gets a new IdempotencyKey.
	Round int
	// Inputs are the results of the batch's earlier functions, in order.
	Inputs []Output
	// CreatedAt is when the batch was accepted.
	CreatedAt time.Time
	// Sender names the sender of the domain's pool the batch holds, for a
	// function that needs one; empty otherwise.
	Sender string
	// SenderSecret resolves the sender's secret from the worker's secret
	// reference (never carried in a record); nil when Sender is empty.
	SenderSecret func() ([]byte, error)
}

// IdempotencyKey names the effect this call asks for: "<batch>/<index>",
// and "<batch>/<index>/<round>" from round 1 on. It is the same on every
// attempt of the function: retries after an error, a call repeated after a
// timeout, a lost reply or a worker that died, another worker taking the
// call over, and the function's fallback. It changes only when the function's
// effect was invalidated (a failed confirmation) and is wanted again.
//
// A handler whose effect reaches outside the system (a payment, an email, a
// row in another database) must make that effect idempotent under this key,
// for example by passing it as the Idempotency-Key of an HTTP API or a
// unique column: a handler can run twice for one effect when its worker dies
// between the effect and its completion record.
func (c *Call) IdempotencyKey() string {
	k := strconv.FormatUint(c.BatchID, 10) + "/" + strconv.Itoa(c.Index)
	if c.Round > 0 {
		k += "/" + strconv.Itoa(c.Round)
	}
	return k
}

// Output is the result of an earlier function of the same batch.
type Output struct {
	Index int     `msgpack:"index" json:"index"`
	Type  string  `msgpack:"type" json:"type"`
	Data  Payload `msgpack:"data,omitempty" json:"data,omitempty"`
	// Ref is the dispatch reference of a function waiting for inclusion.
	Ref string `msgpack:"ref,omitempty" json:"ref,omitempty"`
}

// Result is what a handler returns on success.
type Result struct {
	// Data is the handler's output, msgpack-encoded; later functions of the
	// batch receive it in Call.Inputs.
	Data Payload
	// Ref names what a function waiting for inclusion dispatched (a
	// transaction hash); its Poller is asked about it.
	Ref string
}

// Handler executes one function. Handlers must be safe for concurrent use.
// A returned error is retried under the function's retry logic unless it is
// marked Permanent (or excluded by code); the context carries the call's
// deadline, and a handler should return when it is done.
type Handler interface {
	Handle(ctx context.Context, call *Call) (Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call *Call) (Result, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, call *Call) (Result, error) { return f(ctx, call) }

// Middleware wraps a handler, as net/http middleware does.
type Middleware func(Handler) Handler

// Compensator is implemented by handlers whose effect can be undone. When a
// later function of an atomic unit fails, the worker calls Compensate on the
// functions that already succeeded, in reverse order.
type Compensator interface {
	Compensate(ctx context.Context, call *Call, res Result) error
}

// Failure tells a fallback why the function is being given up on.
type Failure struct {
	BatchID   uint64    `msgpack:"id" json:"batch_id"`
	Index     int       `msgpack:"index" json:"index"`
	Key       string    `msgpack:"key,omitempty" json:"key,omitempty"`
	CreatedAt time.Time `msgpack:"created_at" json:"created_at"`
	// Failures counts the failed attempts.
	Failures int `msgpack:"failures" json:"failures"`
	// LastError is the message of the last attempt's error.
	LastError string `msgpack:"last_error" json:"last_error"`
	// Exhausted is true when the retries ran out; false when the error was not retryable.
	Exhausted bool `msgpack:"exhausted" json:"exhausted"`
}

// Fallback handles a function whose retries are exhausted or whose error was
// not retryable. Success counts as the function handled.
type Fallback interface {
	Fallback(ctx context.Context, call *Call, f Failure) (Result, error)
}

// FallbackFunc adapts a function to Fallback.
type FallbackFunc func(ctx context.Context, call *Call, f Failure) (Result, error)

// Fallback calls f.
func (f FallbackFunc) Fallback(ctx context.Context, call *Call, fl Failure) (Result, error) {
	return f(ctx, call, fl)
}

// ServeMux routes calls to handlers by function type. It is itself a Handler.
// Registration is safe for concurrent use with serving.
type ServeMux struct {
	mu        sync.RWMutex
	handlers  map[string]Handler
	fallbacks map[string]Fallback
	mw        []Middleware
}

// NewServeMux returns an empty mux.
func NewServeMux() *ServeMux {
	return &ServeMux{handlers: map[string]Handler{}, fallbacks: map[string]Fallback{}}
}

// Use appends middleware applied to every handler, outermost first. It
// applies to handlers registered before and after the call.
func (m *ServeMux) Use(mw ...Middleware) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mw = append(m.mw, mw...)
}

// Register registers h for function type typ. It panics on an invalid type or a
// duplicate registration, as net/http does: both are programming errors.
func (m *ServeMux) Register(typ string, h Handler) {
	if err := ValidateType(typ); err != nil {
		panic(err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[typ]; dup {
		panic(fmt.Sprintf("pipeline: handler for %q registered twice", typ))
	}
	m.handlers[typ] = h
}

// RegisterFunc registers f for function type typ.
func (m *ServeMux) RegisterFunc(typ string, f func(ctx context.Context, call *Call) (Result, error)) {
	m.Register(typ, HandlerFunc(f))
}

// RegisterFallback registers the fallback for function type typ.
func (m *ServeMux) RegisterFallback(typ string, fb Fallback) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fallbacks[typ] = fb
}

// Types lists the registered function types, sorted.
func (m *ServeMux) Types() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.handlers))
	for t := range m.handlers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Handler returns the handler for typ with the middleware applied, and
// whether one is registered.
func (m *ServeMux) Handler(typ string) (Handler, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	h, ok := m.handlers[typ]
	if !ok {
		return nil, false
	}
	for i := len(m.mw) - 1; i >= 0; i-- {
		h = m.mw[i](h)
	}
	return h, true
}

// Raw returns the handler for typ without middleware, for capability checks
// such as Compensator.
func (m *ServeMux) Raw(typ string) (Handler, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	h, ok := m.handlers[typ]
	return h, ok
}

// FallbackFor returns the fallback registered for typ, if any.
func (m *ServeMux) FallbackFor(typ string) (Fallback, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	fb, ok := m.fallbacks[typ]
	return fb, ok
}

// Handle dispatches the call to the handler of its type. An unregistered
// type fails permanently with ErrNoHandler.
func (m *ServeMux) Handle(ctx context.Context, call *Call) (Result, error) {
	h, ok := m.Handler(call.Type)
	if !ok {
		return Result{}, Permanent(fmt.Errorf("%w %q", ErrNoHandler, call.Type))
	}
	return h.Handle(ctx, call)
}
