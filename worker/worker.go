// Package worker serves pipeline handlers as a NATS micro service: one
// endpoint per function type, one for atomic units and one per fallback, all
// in a queue group so workers scale out by starting more of them.
//
// Before running a handler a worker claims the call (batch id, index, round)
// in the results bucket, and after it succeeds turns the claim into the
// call's completion record before answering. A repeated call is answered
// from the record instead of running the handler again, a concurrent one is
// told the call is busy, and a claim whose worker died expires. The record
// is written even when the server is away for a while: the worker keeps
// trying for Options.RecordWindow, and the claim lasts that long, so a call
// whose reply was lost is answered from its record rather than run again.
// Atomic units keep their claims and records as entries of the group
// record of their batch id (streams.UnitGroupKey), so the units of one
// request share one claim write and one record write per group.
//
// A request never queues behind busy handlers: when every handler slot is
// taken, a call its record or a live claim can answer is answered at once,
// and any other waits for a slot at most half its caller's time left, then
// is told the worker is busy. The processor retries busy calls later
// without counting an attempt.
//
// A handler can therefore run twice only if its worker dies between the
// handler's effect and the record, or if it overruns its claim; handlers get
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
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// Version is reported by the micro service.
const Version = "0.1.0"

// Defaults of Options: New puts them in the fields left zero, and
// config.DefaultWorker starts from them.
const (
	// DefaultName is the default of Options.Name.
	DefaultName = "worker"
	// DefaultConcurrency is the default of Options.Concurrency.
	DefaultConcurrency = 64
	// DefaultTimeout is the default of Options.Timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultRecordWindow is the default of Options.RecordWindow.
	DefaultRecordWindow = 15 * time.Second
)

// Options configure a Worker. The zero value of each field means its default.
type Options struct {
	// Name identifies the worker in logs and service metadata. Default
	// DefaultName ("worker").
	Name string
	// Concurrency bounds handler calls running at once. Default
	// DefaultConcurrency (64).
	Concurrency int
	// Timeout bounds a call when the request carries no deadline. Default
	// DefaultTimeout (30s).
	Timeout time.Duration
	// RecordWindow is how long past a call's deadline the worker keeps
	// trying to write its completion record (through reconnects and a
	// restarting server), and so how long past the deadline its claim
	// holds. A call whose worker died is run by another worker only after
	// it. Default DefaultRecordWindow (15s).
	RecordWindow time.Duration
	// Logger receives the worker's logs. Default: discard.
	Logger *slog.Logger
	// Telemetry receives the worker's metrics, readiness and spans.
	// Default nil: none.
	Telemetry *telemetry.Telemetry
	// Senders are the secret references of the senders this worker
	// dispatches with, by domain and sender name ("env:NAME" or
	// "file:/path", ValidateSecretRef); a handler resolves its call's
	// through Call.SenderSecret. Default none.
	Senders map[string]map[string]string
}

// Worker serves a ServeMux's handlers.
type Worker struct {
	nc      *nats.Conn
	mux     *pipeline.ServeMux
	opts    Options
	log     *slog.Logger
	js      jetstream.JetStream
	results jetstream.KeyValue
	// recordTTL is the time to live of a completion record, as
	// provisioned on the results bucket; 0: records keep the bucket's age.
	recordTTL time.Duration
	// recordLife is how long a completion record in a unit group counts:
	// recordTTL, or the bucket's age on a bucket whose records carry none.
	recordLife time.Duration
	// stopping, when set (tests), runs as Run begins to stop, once new
	// requests are refused.
	stopping func()
	// groups remembers the unit groups this worker last wrote or read.
	groups groupCache
	// pub publishes the claims and completion records of a batch of units
	// pipelined.
	pub *jsapi.AckPublisher
	sem chan struct{}
	// waiters bounds the requests looking up their record or waiting for
	// a slot while every slot is taken; past it, requests are told busy.
	waiters chan struct{}
}

// New returns a worker serving mux over nc. The results bucket must exist.
func New(ctx context.Context, nc *nats.Conn, mux *pipeline.ServeMux, opts Options) (*Worker, error) {
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.RecordWindow <= 0 {
		opts.RecordWindow = DefaultRecordWindow
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
	ttl, err := streams.ReadRecordTTL(ctx, kv)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	life := ttl
	if life <= 0 {
		life = streams.MinResultsAge
		if st, err := kv.Status(ctx); err == nil && st.TTL() > 0 {
			life = st.TTL()
		}
	}
	pub, err := jsapi.NewAckPublisher(nc, kvTimeout)
	if err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	w := &Worker{
		nc: nc, mux: mux, opts: opts, js: js, results: kv, recordTTL: ttl, recordLife: life, pub: pub,
		log:     opts.Logger.With("worker", opts.Name),
		sem:     make(chan struct{}, opts.Concurrency),
		waiters: make(chan struct{}, 4*opts.Concurrency),
	}
	w.observe()
	return w, nil
}

// Run serves until ctx is done, then drains: it leaves the queue group, lets
// the calls in flight finish and answer, answers every request that was
// already on its way "503 shutting down" (a processor takes that for busy
// and tries again later, on another worker), and returns only when no
// handler can run any more. The wait is bounded by the deadlines of the
// calls in flight.
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
	// The gate admits requests until shutdown; micro's endpoint
	// subscriptions are not reachable, so refusing at the gate is what stops
	// a request queued in the client from starting a handler after Run.
	var gate drain.Gate
	defer w.stop(svc, &gate)
	add := func(name, subject string, h endpoint) error {
		return svc.AddEndpoint(name, micro.HandlerFunc(func(req micro.Request) {
			w.serve(ctx, &gate, req, h)
		}), micro.WithEndpointSubject(subject))
	}
	for _, typ := range w.mux.Types() {
		name := strings.ReplaceAll(typ, ".", "_") // micro endpoint names take no dots
		if err := add(name, streams.WorkSubject(typ), endpoint{run: w.call, key: callKey}); err != nil {
			return fmt.Errorf("worker: endpoint %s: %w", typ, err)
		}
		if err := w.addInclusion(add, typ, name); err != nil {
			return err
		}
		if _, ok := w.mux.FallbackFor(typ); ok {
			if err := add("fallback-"+name, streams.FallbackSubject(typ), endpoint{run: w.fallback, key: fallbackKey}); err != nil {
				return fmt.Errorf("worker: fallback endpoint %s: %w", typ, err)
			}
		}
	}
	if err := add("unit", streams.WorkUnitSubject, endpoint{run: w.unit, lookup: w.lookupUnit}); err != nil {
		return fmt.Errorf("worker: unit endpoint: %w", err)
	}
	if err := svc.AddEndpoint("units", micro.HandlerFunc(func(req micro.Request) {
		w.serveUnits(ctx, &gate, req)
	}), micro.WithEndpointSubject(streams.WorkUnitsSubject)); err != nil {
		return fmt.Errorf("worker: units endpoint: %w", err)
	}
	// The presence record tells authz which function types are served; it
	// is deleted as the worker stops, before the drain.
	present := make(chan struct{})
	go func() {
		defer close(present)
		streams.KeepPresence(ctx, w.js, streams.WorkerPresenceKey(w.opts.Name, streams.PresenceInstance()), records.Presence{
			Name: w.opts.Name, Kind: records.PresenceWorker, Types: w.mux.Types(), Since: time.Now().UTC(),
		}, w.log)
	}()
	w.log.Info("worker serving", "types", w.mux.Types(), "concurrency", w.opts.Concurrency)
	<-ctx.Done()
	// Stopping: from now on a request is refused ("shutting down", which a
	// processor retries elsewhere), not started while the presence record
	// is deleted and the service stops.
	gate.Close()
	if w.stopping != nil {
		w.stopping()
	}
	<-present
	return nil
}

// stop leaves the queue group, refuses what arrives from now on, waits for
// the calls admitted and then for every request already in the client to
// have been refused.
func (w *Worker) stop(svc micro.Service, gate *drain.Gate) {
	if err := svc.Stop(); err != nil {
		w.log.Warn("service stop failed", "err", err)
	}
	gate.Close()
	gate.Wait()
	if err := drain.Delivered(w.nc, drain.Timeout); err != nil {
		w.log.Warn("requests may be left unanswered", "err", err)
	}
}

// serve decodes a request and runs it on its own goroutine, bounded by the
// concurrency limit, so one slow handler does not hold up the endpoint.
// With every slot taken it never lets the request wait past its caller's
// deadline: see await. Once gate is closed it answers "503 shutting down".
func (w *Worker) serve(ctx context.Context, gate *drain.Gate, req micro.Request, h endpoint) {
	if !w.admit(gate, req) {
		return
	}
	defer gate.Leave()
	wr, err := records.Decode[records.WorkRequest](req.Data())
	if err != nil {
		_ = streams.Reply(w.nc, req.Reply(), nil, streams.WorkCodeBadRequest, err.Error())
		return
	}
	ctx = w.opts.Telemetry.Extract(ctx, nats.Header(req.Headers()))
	deadline := w.deadlineOf(req)
	select {
	case w.sem <- struct{}{}:
		gate.Go(func() {
			defer func() { <-w.sem }()
			w.reply(req.Reply(), &wr, w.run(ctx, &wr, h, deadline))
		})
		return
	default:
	}
	select {
	case w.waiters <- struct{}{}:
		gate.Go(func() {
			defer func() { <-w.waiters }()
			w.reply(req.Reply(), &wr, w.await(ctx, &wr, h, deadline))
		})
	default:
		w.reply(req.Reply(), &wr, w.saturated())
	}
}

// deadlineOf is when the caller of req stops waiting: its deadline header,
// or Options.Timeout from now.
func (w *Worker) deadlineOf(req micro.Request) time.Time {
	if v := req.Headers().Get(streams.HeaderDeadline); v != "" {
		if ns, err := strconv.ParseInt(v, 10, 64); err == nil {
			return time.Unix(0, ns)
		}
	}
	return time.Now().Add(w.opts.Timeout)
}

// endpoint is what a worker serves on one subject: run executes a request,
// key names the completion key it would claim ("" for a malformed request,
// or none), lookup answers a request from its record without running it
// (when set, instead of key: atomic units keep theirs in unit groups).
type endpoint struct {
	run    func(context.Context, *records.WorkRequest) *records.WorkReply
	key    func(*records.WorkRequest) string
	lookup func(context.Context, *records.WorkRequest, time.Time) *records.WorkReply
}

// await serves a request that found every handler slot taken. A call its
// completion record or a live claim answers is answered without a slot;
// any other waits for a slot at most half its caller's time left (so the
// handler keeps the other half), then is told the worker is busy.
func (w *Worker) await(ctx context.Context, req *records.WorkRequest, h endpoint, deadline time.Time) *records.WorkReply {
	if h.lookup != nil {
		if rep := h.lookup(ctx, req, deadline); rep != nil {
			return rep
		}
	} else if key := h.key(req); key != "" {
		if rep := w.lookup(ctx, key, deadline); rep != nil {
			return rep
		}
	}
	t := time.NewTimer(time.Until(deadline) / 2)
	defer t.Stop()
	select {
	case w.sem <- struct{}{}:
		defer func() { <-w.sem }()
		return w.run(ctx, req, h, deadline)
	case <-t.C:
	case <-ctx.Done():
	}
	return w.saturated()
}

// saturated is the reply when no handler slot came free in time.
func (w *Worker) saturated() *records.WorkReply {
	w.opts.Telemetry.WorkerBusy()
	return busy(fmt.Sprintf("worker %s: all %d handler slots busy", w.opts.Name, w.opts.Concurrency))
}

// run executes a request in a slot. The handler's deadline is the caller's
// less a margin, so a handler that honours it answers (a failure that
// counts) before its caller stops waiting, rather than being taken for a
// worker that did not answer.
func (w *Worker) run(ctx context.Context, req *records.WorkRequest, h endpoint, deadline time.Time) *records.WorkReply {
	margin := min(time.Until(deadline)/10, time.Second)
	// The call outlives ctx on purpose: shutdown drains calls in flight.
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(-margin))
	defer cancel()
	return w.observed(cctx, req, h)
}

// reply answers on the request's reply subject.
func (w *Worker) reply(subject string, req *records.WorkRequest, rep *records.WorkReply) {
	b, err := records.Encode(rep)
	if err != nil {
		_ = streams.Reply(w.nc, subject, nil, streams.WorkCodeInternal, err.Error())
		return
	}
	if err := streams.Reply(w.nc, subject, b, "", ""); err != nil {
		w.log.Warn("reply lost", "batch_id", req.BatchID, "err", err)
	}
}

// callKey, unitKey and fallbackKey are the completion keys of the three
// kinds of request, one place for each. A unit's key names its entry in
// its group record (streams.UnitGroupKey), and its own key only for a
// record too large to share the group's value.
func callKey(req *records.WorkRequest) string {
	if len(req.Calls) != 1 {
		return ""
	}
	return streams.ResultKey(req.BatchID, req.Calls[0].Index, req.Round)
}

func unitKey(req *records.WorkRequest) string { return streams.ResultKey(req.BatchID, -1, req.Round) }

func fallbackKey(req *records.WorkRequest) string {
	if len(req.Calls) != 1 {
		return ""
	}
	return streams.FallbackResultKey(req.BatchID, req.Calls[0].Index, req.Round)
}

// call runs one function of a non-atomic batch.
func (w *Worker) call(ctx context.Context, req *records.WorkRequest) *records.WorkReply {
	if len(req.Calls) != 1 {
		return failure(req, 0, pipeline.Permanent(fmt.Errorf("worker: a function request carries exactly one call (got %d)", len(req.Calls))))
	}
	c := req.Calls[0]
	h, ok := w.mux.Handler(c.Type)
	if !ok {
		return failure(req, c.Index, pipeline.Permanent(fmt.Errorf("%w %q", pipeline.ErrNoHandler, c.Type)))
	}
	return w.once(ctx, req, callKey(req), func() *records.WorkReply {
		res, err := w.handle(ctx, h, w.withSender(callFor(req, c, req.Inputs), req), telemetry.KindFunction)
		if err != nil {
			return failure(req, c.Index, err)
		}
		return &records.WorkReply{Outputs: []pipeline.Output{{Index: c.Index, Type: c.Type, Data: res.Data, Ref: res.Ref}}}
	})
}

// unit runs an atomic batch's functions in order, all or nothing, claimed
// and recorded in its unit group as a unit of a request of several is.
func (w *Worker) unit(ctx context.Context, req *records.WorkRequest) *records.WorkReply {
	rep := w.runGrouped(ctx, []records.WorkRequest{*req}, func(u *records.WorkRequest) *records.WorkReply {
		return w.runUnit(ctx, u)
	})[0]
	return &rep
}

func (w *Worker) runUnit(ctx context.Context, req *records.WorkRequest) *records.WorkReply {
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
	undo := func(cause error, index int) *records.WorkReply {
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
		call := w.withSender(callFor(req, c, inputs), req)
		res, err := w.handle(uctx, h, call, telemetry.KindFunction)
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
	return &records.WorkReply{Outputs: outputs}
}

// fallback runs the fallback of a function whose retries are exhausted or
// whose error was not retryable. Its success is recorded like the function's.
func (w *Worker) fallback(ctx context.Context, req *records.WorkRequest) *records.WorkReply {
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
	return w.once(ctx, req, fallbackKey(req), func() *records.WorkReply {
		res, err := w.handle(ctx, pipeline.HandlerFunc(func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
			return fb.Fallback(ctx, call, *req.Failure)
		}), callFor(req, c, req.Inputs), telemetry.KindFallback)
		if err != nil {
			return failure(req, c.Index, pipeline.Permanent(err))
		}
		return &records.WorkReply{Outputs: []pipeline.Output{{Index: c.Index, Type: c.Type, Data: res.Data}}}
	})
}

func newCall(req *records.WorkRequest, c records.WorkCall, inputs []pipeline.Output) *pipeline.Call {
	return &pipeline.Call{
		BatchID: req.BatchID, Index: c.Index, Domain: req.Domain, Type: c.Type,
		Payload: c.Payload, Key: req.Key, Submitter: req.Submitter, Label: req.Label,
		Attempt: req.Attempt, Inputs: inputs, CreatedAt: req.CreatedAt,
	}
}

// callFor is the Call a handler receives: newCall's, with the round that
// makes its idempotency key differ once an earlier effect was invalidated.
func callFor(req *records.WorkRequest, c records.WorkCall, inputs []pipeline.Output) *pipeline.Call {
	call := newCall(req, c, inputs)
	call.Round = req.Round
	return call
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
func failure(req *records.WorkRequest, index int, err error) *records.WorkReply {
	r := req.Retry
	if r == nil {
		r = &pipeline.NoRetry
	}
	return &records.WorkReply{Error: &records.WorkError{
		Message:   capMessage(err.Error()),
		Codes:     pipeline.Codes(err),
		Permanent: pipeline.IsPermanent(err),
		Retryable: r.Retryable(err),
		Index:     index,
	}}
}

// maxMessage caps an error message crossing the wire: handler errors are
// untrusted and unbounded, and they end up in progress records and dead
// letters, which must fit the server's max_payload.
const maxMessage = 4 << 10

func capMessage(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	n := maxMessage
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "… (truncated)"
}

// admit lets a request in: refused before anything runs when its answer
// would land outside an inbox (the reply subject is the caller's choice and
// the worker answers with its own rights), answered "503 shutting down"
// once gate is closed. When it says yes, the caller leaves gate when done.
func (w *Worker) admit(gate *drain.Gate, req micro.Request) bool {
	if err := streams.CheckReply(req.Reply()); err != nil || req.Reply() == "" {
		w.log.Warn(streams.LogReplyRefused, "subject", logging.Capped(req.Subject()), "reply", logging.Capped(req.Reply()))
		return false
	}
	if !gate.Enter() {
		_ = streams.Reply(w.nc, req.Reply(), nil, streams.WorkCodeUnavailable, "worker: shutting down")
		return false
	}
	return true
}
