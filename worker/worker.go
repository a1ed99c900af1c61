// Package worker serves pipeline handlers as a NATS micro service: one
// endpoint per function type, one for atomic units and one per fallback, all
// in a queue group so workers scale out by starting more of them.
//
// Before running a handler a worker claims the call (batch id, index, round)
// in the results bucket, and after it succeeds turns the claim into the
// call's completion record before answering. A repeated call is answered
// from the record instead of running the handler again, a concurrent one is
// told the call is busy, and a claim whose worker died expires. A handler can
// therefore run twice only if its worker dies between the handler's effect
// and the record, or if it overruns its context's deadline; handlers get
// Call.IdempotencyKey for that edge.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// Version is reported by the micro service.
const Version = "0.1.0"

// Options configure a Worker. The zero value of each field means its default.
type Options struct {
	// Name identifies the worker in logs and service metadata. Default "worker".
	Name string
	// Concurrency bounds handler calls running at once. Default 64.
	Concurrency int
	// Timeout bounds a call when the request carries no deadline. Default 30s.
	Timeout time.Duration
	// Logger receives the worker's logs. Default: discard.
	Logger *slog.Logger
}

// Worker serves a ServeMux's handlers.
type Worker struct {
	nc      *nats.Conn
	mux     *pipeline.ServeMux
	opts    Options
	log     *slog.Logger
	results jetstream.KeyValue
	sem     chan struct{}
	wg      sync.WaitGroup
}

// New returns a worker serving mux over nc. The results bucket must exist.
func New(ctx context.Context, nc *nats.Conn, mux *pipeline.ServeMux, opts Options) (*Worker, error) {
	if opts.Name == "" {
		opts.Name = "worker"
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 64
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if len(mux.Types()) == 0 {
		return nil, errors.New("worker: the mux has no handlers: register at least one function type")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, streams.BucketResults)
	if err != nil {
		return nil, fmt.Errorf("worker: results bucket: %w", err)
	}
	return &Worker{
		nc: nc, mux: mux, opts: opts, results: kv,
		log: opts.Logger.With("worker", opts.Name),
		sem: make(chan struct{}, opts.Concurrency),
	}, nil
}

// Run serves until ctx is done, then stops taking requests and waits for
// the calls in flight to finish.
func (w *Worker) Run(ctx context.Context) error {
	svc, err := micro.AddService(w.nc, micro.Config{
		Name:        streams.WorkerService,
		Version:     Version,
		Description: "tickflow worker: runs functions by type",
		QueueGroup:  streams.WorkQueueGroup,
		Metadata:    map[string]string{"name": w.opts.Name},
	})
	if err != nil {
		return fmt.Errorf("worker: add service: %w", err)
	}
	defer func() {
		_ = svc.Stop()
		w.wg.Wait()
	}()
	add := func(name, subject string, h func(context.Context, *streams.WorkRequest) *streams.WorkReply) error {
		return svc.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			w.serve(ctx, req, h)
		}), micro.WithEndpointSubject(subject))
	}
	for _, typ := range w.mux.Types() {
		name := strings.ReplaceAll(typ, ".", "_") // micro endpoint names take no dots
		if err := add(name, streams.WorkSubject(typ), w.call); err != nil {
			return fmt.Errorf("worker: endpoint %s: %w", typ, err)
		}
		if _, ok := w.mux.FallbackFor(typ); ok {
			if err := add("fallback-"+name, streams.FallbackSubject(typ), w.fallback); err != nil {
				return fmt.Errorf("worker: fallback endpoint %s: %w", typ, err)
			}
		}
	}
	if err := add("unit", streams.WorkUnitSubject, w.unit); err != nil {
		return fmt.Errorf("worker: unit endpoint: %w", err)
	}
	w.log.Info("worker serving", "types", w.mux.Types(), "concurrency", w.opts.Concurrency)
	<-ctx.Done()
	return nil
}

// serve decodes a request and runs it on its own goroutine, bounded by the
// concurrency limit, so one slow handler does not hold up the endpoint.
func (w *Worker) serve(ctx context.Context, req micro.Request, h func(context.Context, *streams.WorkRequest) *streams.WorkReply) {
	// The reply subject is the caller's choice and the worker answers with
	// its own rights: a request whose answer would land outside an inbox is
	// refused before anything runs.
	if err := streams.CheckReply(req.Reply()); err != nil || req.Reply() == "" {
		w.log.Warn(streams.LogReplyRefused, "subject", req.Subject(), "reply", logging.Capped(req.Reply()))
		return
	}
	wr, err := streams.Decode[streams.WorkRequest](req.Data())
	if err != nil {
		_ = streams.Reply(w.nc, req.Reply(), nil, "400", err.Error())
		return
	}
	select {
	case w.sem <- struct{}{}:
	case <-ctx.Done():
		_ = streams.Reply(w.nc, req.Reply(), nil, "503", "worker: shutting down")
		return
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.sem }()
		deadline := time.Now().Add(w.opts.Timeout)
		if v := req.Headers().Get(streams.HeaderDeadline); v != "" {
			if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
				deadline = time.Unix(0, ns)
			}
		}
		// The call outlives ctx on purpose: shutdown drains calls in flight.
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		reply := h(cctx, &wr)
		b, err := streams.Encode(reply)
		if err != nil {
			_ = streams.Reply(w.nc, req.Reply(), nil, "500", err.Error())
			return
		}
		if err := streams.Reply(w.nc, req.Reply(), b, "", ""); err != nil {
			w.log.Warn("reply lost", "batch_id", wr.BatchID, "err", err)
		}
	}()
}

// call runs one function of a non-atomic batch.
func (w *Worker) call(ctx context.Context, req *streams.WorkRequest) *streams.WorkReply {
	if len(req.Calls) != 1 {
		return failure(req, 0, pipeline.Permanent(fmt.Errorf("worker: a function request carries exactly one call (got %d)", len(req.Calls))))
	}
	c := req.Calls[0]
	h, ok := w.mux.Handler(c.Type)
	if !ok {
		return failure(req, c.Index, pipeline.Permanent(fmt.Errorf("%w %q", pipeline.ErrNoHandler, c.Type)))
	}
	return w.once(ctx, req, streams.ResultKey(req.BatchID, c.Index, req.Round), func() *streams.WorkReply {
		res, err := safeHandle(ctx, h, newCall(req, c, req.Inputs))
		if err != nil {
			return failure(req, c.Index, err)
		}
		return &streams.WorkReply{Outputs: []pipeline.Output{{Index: c.Index, Type: c.Type, Data: res.Data}}}
	})
}

// unit runs an atomic batch's functions in order, all or nothing.
func (w *Worker) unit(ctx context.Context, req *streams.WorkRequest) *streams.WorkReply {
	return w.once(ctx, req, streams.ResultKey(req.BatchID, -1, req.Round), func() *streams.WorkReply {
		return w.runUnit(ctx, req)
	})
}

func (w *Worker) runUnit(ctx context.Context, req *streams.WorkRequest) *streams.WorkReply {
	u := &pipeline.Unit{}
	uctx := pipeline.WithUnit(ctx, u)
	type done struct {
		h    pipeline.Handler
		call *pipeline.Call
		res  pipeline.Result
	}
	var ran []done
	outputs := make([]pipeline.Output, 0, len(req.Calls))
	inputs := req.Inputs
	undo := func(cause error, index int) *streams.WorkReply {
		// Undo in reverse: compensations of handlers that succeeded, then the
		// unit's own rollback steps.
		var errs []error
		for i := len(ran) - 1; i >= 0; i-- {
			if c, ok := ran[i].h.(pipeline.Compensator); ok {
				errs = append(errs, c.Compensate(ctx, ran[i].call, ran[i].res))
			}
		}
		errs = append(errs, u.Rollback(ctx))
		if err := errors.Join(errs...); err != nil {
			w.log.Error("rollback incomplete", "batch_id", req.BatchID, "err", err)
			cause = fmt.Errorf("%w (rollback incomplete: %v)", cause, err)
		}
		return failure(req, index, cause)
	}
	for _, c := range req.Calls {
		h, ok := w.mux.Handler(c.Type)
		if !ok {
			return undo(pipeline.Permanent(fmt.Errorf("%w %q", pipeline.ErrNoHandler, c.Type)), c.Index)
		}
		raw, _ := w.mux.Raw(c.Type)
		call := newCall(req, c, inputs)
		res, err := safeHandle(uctx, h, call)
		if err != nil {
			return undo(err, c.Index)
		}
		ran = append(ran, done{h: raw, call: call, res: res})
		out := pipeline.Output{Index: c.Index, Type: c.Type, Data: res.Data}
		outputs = append(outputs, out)
		inputs = append(inputs[:len(inputs):len(inputs)], out)
	}
	if err := u.Commit(ctx); err != nil {
		return undo(fmt.Errorf("worker: unit commit: %w", err), req.Calls[len(req.Calls)-1].Index)
	}
	return &streams.WorkReply{Outputs: outputs}
}

// fallback runs the fallback of a function whose retries are exhausted or
// whose error was not retryable. Its success is recorded like the function's.
func (w *Worker) fallback(ctx context.Context, req *streams.WorkRequest) *streams.WorkReply {
	if len(req.Calls) != 1 || req.Failure == nil {
		return failure(req, 0, pipeline.Permanent(errors.New("worker: a fallback request carries one call and its failure")))
	}
	c := req.Calls[0]
	fb, ok := w.mux.FallbackFor(c.Type)
	if !ok {
		r := failure(req, c.Index, pipeline.Permanent(fmt.Errorf("worker: no fallback for %q", c.Type)))
		r.Error.NoFallback = true
		return r
	}
	return w.once(ctx, req, streams.ResultKey(req.BatchID, c.Index, req.Round)+".fallback", func() *streams.WorkReply {
		res, err := safeHandle(ctx, pipeline.HandlerFunc(func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
			return fb.Fallback(ctx, call, *req.Failure)
		}), newCall(req, c, req.Inputs))
		if err != nil {
			return failure(req, c.Index, pipeline.Permanent(err))
		}
		return &streams.WorkReply{Outputs: []pipeline.Output{{Index: c.Index, Type: c.Type, Data: res.Data}}}
	})
}

// claimGrace is how long past its caller's deadline a call's claim holds:
// a handler that honours its context has returned by then.
const claimGrace = 2 * time.Second

// recordTimeout bounds writing a completion record; the record is written
// even when the caller's deadline has passed, because the effect happened.
const recordTimeout = 5 * time.Second

// once runs a function at most once per completion key. It first claims the
// key (a create in the results bucket, so only one worker runs it at a
// time), runs fn, and turns the claim into the completion record before
// answering; a repeated call is answered from the record, a concurrent one
// is told the call is busy, and a claim whose holder died expires. A failed
// run releases the claim: failures leave no record, so a retry runs again.
func (w *Worker) once(ctx context.Context, req *streams.WorkRequest, key string, fn func() *streams.WorkReply) *streams.WorkReply {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(w.opts.Timeout)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	claim, err := streams.Encode(&streams.Completion{Running: true, Until: deadline.Add(claimGrace), Worker: w.opts.Name})
	if err != nil {
		return unavailable(err)
	}
	var rev uint64
	for attempt := 0; ; attempt++ {
		if rev, err = w.results.Create(rctx, key, claim); err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrKeyExists) || attempt == 3 {
			return unavailable(fmt.Errorf("worker: claim %s: %w", key, err))
		}
		e, err := w.results.Get(rctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return unavailable(fmt.Errorf("worker: read %s: %w", key, err))
		}
		c, err := streams.Decode[streams.Completion](e.Value())
		if err != nil {
			return unavailable(fmt.Errorf("worker: completion record %s: %w", key, err))
		}
		if !c.Running {
			return &streams.WorkReply{Outputs: c.Outputs, Recorded: true}
		}
		if time.Now().Before(c.Until) {
			return &streams.WorkReply{Error: &streams.WorkError{Busy: true, Retryable: true,
				Message: fmt.Sprintf("worker: %s is running on %s until %s", key, c.Worker, c.Until.Format(time.RFC3339Nano))}}
		}
		// The holder died (or overran its deadline): take the claim over.
		if rev, err = w.results.Update(rctx, key, claim, e.Revision()); err == nil {
			w.log.Warn("expired claim taken over", "key", key, "holder", c.Worker)
			break
		}
	}
	rep := fn()
	if rep.Error != nil {
		if err := w.results.Delete(rctx, key, jetstream.LastRevision(rev)); err != nil {
			w.log.Warn("claim not released; it expires", "key", key, "err", err)
		}
		return rep
	}
	done, err := streams.Encode(&streams.Completion{Outputs: rep.Outputs, Worker: w.opts.Name})
	if err == nil {
		_, err = w.results.Update(rctx, key, done, rev)
	}
	if err != nil {
		// The effect happened; say so. The claim stays until it expires, and
		// the processor records the step, so nothing asks again.
		w.log.Error("completion record not written", "key", key, "err", err)
	}
	return rep
}

// unavailable is a reply for a call that could not be attempted; the
// processor retries it without counting an attempt.
func unavailable(err error) *streams.WorkReply {
	return &streams.WorkReply{Error: &streams.WorkError{Message: err.Error(), Busy: true, Retryable: true}}
}

func newCall(req *streams.WorkRequest, c streams.WorkCall, inputs []pipeline.Output) *pipeline.Call {
	return &pipeline.Call{
		BatchID: req.BatchID, Index: c.Index, Domain: req.Domain, Type: c.Type,
		Payload: c.Payload, Key: req.Key, Submitter: req.Submitter, Label: req.Label,
		Attempt: req.Attempt, Inputs: inputs, CreatedAt: req.CreatedAt,
	}
}

// safeHandle runs the handler and turns a panic into a permanent error.
func safeHandle(ctx context.Context, h pipeline.Handler, call *pipeline.Call) (res pipeline.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = pipeline.Permanent(fmt.Errorf("worker: handler %q panicked: %v\n%s", call.Type, r, debug.Stack()))
		}
	}()
	if err := ctx.Err(); err != nil {
		return pipeline.Result{}, err
	}
	return h.Handle(ctx, call)
}

// failure turns a handler error into a reply, classified under the request's retry logic.
func failure(req *streams.WorkRequest, index int, err error) *streams.WorkReply {
	r := req.Retry
	if r == nil {
		r = &pipeline.NoRetry
	}
	return &streams.WorkReply{Error: &streams.WorkError{
		Message:   err.Error(),
		Codes:     pipeline.Codes(err),
		Permanent: pipeline.IsPermanent(err),
		Retryable: r.Retryable(err),
		Index:     index,
	}}
}
