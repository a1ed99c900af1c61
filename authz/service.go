package authz

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
	"go.opentelemetry.io/otel/trace"
)

// Version is reported by the micro service.
const Version = "0.1.0"

// Defaults of Options: New puts them in the fields left zero, and
// config.DefaultAuthz starts from them. DefaultCallbackBackoff is the
// default of Options.CallbackBackoff.
const (
	// DefaultOwner is the default of Options.Owner.
	DefaultOwner = "owner"
	// DefaultConcurrency is the default of Options.Concurrency.
	DefaultConcurrency = 64
)

// Options configure the service. The zero value of each field means its default.
type Options struct {
	// Owner is the identity allowed to pause, resume, evict, insert, replay
	// and reload. Default DefaultOwner ("owner").
	Owner string
	// Table is the authorization table. Required unless TablePath is set.
	Table *Table
	// TablePath is the file the table is (re)loaded from.
	TablePath string
	// Logger receives the service's logs. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Concurrency bounds the requests served at once, and separately the
	// callbacks applied at once: the callbacks of a group, whose record
	// writes are sent together, and those applied one by one. Default
	// DefaultConcurrency (64). One caller's requests are served on at most
	// three quarters of it at once, and a caller holds at most a quarter of
	// it in flight unless the table says otherwise (Caller.MaxRequests).
	Concurrency int
	// CallbackBackoff lists the delays before each new attempt to apply a
	// callback that failed. A callback whose batch record (or itself)
	// cannot be read is dead-lettered after the last; other failures are
	// retried without end, at most 30s apart. Default
	// DefaultCallbackBackoff.
	CallbackBackoff []time.Duration
	// Telemetry receives the service's metrics, readiness and spans.
	// Default nil: none.
	Telemetry *telemetry.Telemetry
}

// Service is the authorization service. Any number of replicas may run.
// It is composed of one part per duty, each with the handles it needs:
// the endpoint layer (api.go) and Run delegate to them.
type Service struct {
	opts  Options
	log   *slog.Logger
	nc    *nats.Conn
	js    jetstream.JetStream
	table atomic.Pointer[Table]
	// holdRequest, set by tests only, runs before each request's handler:
	// a request it holds keeps its worker busy.
	holdRequest func(user, op string)

	// store reads and writes batch records (record.go, retention.go).
	store *recordStore
	// intake takes submissions onto the queues (intake.go).
	intake *intake
	// submitters keeps the submitter index (submitter.go).
	submitters *submitterIndex
	// slots counts the batches in process against the labels' limits.
	slots *slotKeeper
	// senderPool keeps the domains' senders (senders.go).
	senderPool *senderPool
	// keyOrders keeps each key's waiting batches (keys.go); keyRepair is
	// the repair loop of keys and batches left half done (keyrepair.go).
	keyOrders *keyOrders
	keyRepair *keyRepairer
	// removal finishes batches as RemovedByOwner (removal.go).
	removal *remover
	// scheduledBatches keeps the batches sent to run later (scheduled.go).
	scheduledBatches *scheduledBatches
	// sched fires the table's schedules (scheduler.go, schedules.go).
	sched *scheduler
	// keeper keeps the queues' streams from emptying (keeper.go).
	keeper *keeper
	// applier applies the callbacks (callbacks.go, callbatch.go, poison.go).
	applier *callbackApplier
	// deadLetters keeps the dead-letter queue (dlq.go, purge.go).
	deadLetters *deadLetters
	// inspect answers the owner's views of what runs (inspect.go).
	inspect *inspector
	// queueEdits lists and edits the queues (queue.go, removal.go).
	queueEdits *queueEditor
	// presence compares the running processes with the table (presence.go).
	presence *presenceWatch
	// resumeHold, in tests, is called once the start's check has held
	// back the batches recorded just before it (resumeYoung).
	resumeHold func()
}

// bound is what New binds to: the buckets and streams the parts share.
type bound struct {
	acks                                                      *jsapi.AckPublisher
	batches, progress, state, locks, senders, schedules, keys jetstream.KeyValue
	queues                                                    map[pipeline.Priority]jetstream.Stream
	dlq, scheduled                                            jetstream.Stream
	// callbacks delivers the processors' callbacks; due the schedules
	// that fired.
	callbacks, due jetstream.Consumer
}

// New binds the service to its buckets and streams, which must have been
// provisioned; if one is missing the error matches ErrNotProvisioned.
func New(ctx context.Context, nc *nats.Conn, opts Options) (*Service, error) {
	if opts.Owner == "" {
		opts.Owner = DefaultOwner
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if len(opts.CallbackBackoff) == 0 {
		opts.CallbackBackoff = slices.Clone(DefaultCallbackBackoff)
	}
	for _, d := range opts.CallbackBackoff {
		if d <= 0 {
			return nil, fmt.Errorf("authz: callback backoff %v: every delay must be positive", opts.CallbackBackoff)
		}
	}
	if opts.Table == nil {
		if opts.TablePath == "" {
			return nil, errors.New("authz: an authorization table (or its path) is required")
		}
		t, err := LoadTable(opts.TablePath)
		if err != nil {
			return nil, err
		}
		opts.Table = t
	}
	if err := opts.Table.schedulesReady(); err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	s := &Service{opts: opts, log: opts.Logger.With("component", "authz"), nc: nc, js: js}
	s.table.Store(opts.Table)
	s.watchDomains(opts.Table)
	h, err := bind(ctx, nc, js)
	if err != nil {
		return nil, err
	}
	progress := streams.NewProgressStore(h.progress, s.opts.Now)
	s.store = &recordStore{js: js, batches: h.batches, acks: h.acks, progress: progress, owner: opts.Owner, now: s.opts.Now}
	if err := s.store.readRetention(ctx, h.progress, progress); err != nil {
		return nil, err
	}
	s.compose(h, progress)
	s.observe(nc)
	return s, nil
}

// bind binds the buckets, streams and consumers the parts share, which
// must have been provisioned; if one is missing the error matches
// ErrNotProvisioned.
func bind(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*bound, error) {
	h := &bound{queues: map[pipeline.Priority]jetstream.Stream{}}
	var err error
	if h.acks, err = jsapi.NewAckPublisher(nc, pubAckWait); err != nil {
		return nil, fmt.Errorf("authz: %w", err)
	}
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{{streams.BucketBatches, &h.batches}, {streams.BucketProgress, &h.progress}, {streams.BucketDomainStates, &h.state}, {streams.BucketLocks, &h.locks}, {streams.BucketSenders, &h.senders}, {streams.BucketSchedules, &h.schedules}} {
		if *b.kv, err = js.KeyValue(ctx, b.name); err != nil {
			return nil, bindError("bucket "+b.name, err)
		}
	}
	if h.keys, err = js.KeyValue(ctx, streams.BucketKeys); err != nil {
		return nil, bindError("bucket "+streams.BucketKeys, err)
	}
	for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		if h.queues[p], err = js.Stream(ctx, streams.QueueStream(p)); err != nil {
			return nil, bindError("stream "+streams.QueueStream(p), err)
		}
	}
	if h.dlq, err = js.Stream(ctx, streams.StreamDLQ); err != nil {
		return nil, bindError("stream "+streams.StreamDLQ, err)
	}
	if h.callbacks, err = js.Consumer(ctx, streams.StreamCallbacks, streams.CallbacksConsumer); err != nil {
		return nil, bindError("consumer "+streams.CallbacksConsumer, err)
	}
	if h.scheduled, err = js.Stream(ctx, streams.StreamScheduled); err != nil {
		return nil, bindError("stream "+streams.StreamScheduled, err)
	}
	if h.due, err = js.Consumer(ctx, streams.StreamScheduled, streams.ScheduledConsumer); err != nil {
		return nil, bindError("consumer "+streams.ScheduledConsumer+" on "+streams.StreamScheduled, err)
	}
	return h, nil
}

// compose builds the service's parts, one per duty, on what New bound;
// the parts that call each other are linked last.
func (s *Service) compose(h *bound, progress *streams.ProgressStore) {
	now, log, tel := s.opts.Now, s.log, s.opts.Telemetry
	store := s.store
	s.submitters = &submitterIndex{acks: h.acks, batches: h.batches, now: now, owner: s.opts.Owner}
	s.presence = &presenceWatch{js: s.js, table: s.Table, log: log}
	s.keeper = newKeeper(s.js, h.queues, log)
	s.senderPool = &senderPool{senders: h.senders, progress: progress, now: now, log: log}
	s.slots = &slotKeeper{locks: h.locks, store: store, now: now, log: log}
	s.removal = &remover{js: s.js, queues: h.queues, scheduled: h.scheduled, progress: progress, store: store, owner: s.opts.Owner, log: log}
	s.scheduledBatches = &scheduledBatches{js: s.js, acks: h.acks, scheduled: h.scheduled, due: h.due, progress: progress, store: store,
		removal: s.removal, now: now, log: log}
	order := keyorder.New(h.keys, now)
	s.keyOrders = &keyOrders{js: s.js, order: order, senders: h.senders, progress: progress, store: store,
		scheduled: s.scheduledBatches, removal: s.removal, now: now, log: log}
	s.keyRepair = &keyRepairer{keys: s.keyOrders, order: order, store: store, log: log,
		repairs: repairs{pending: map[repairRef]*repairWait{}, wake: make(chan struct{}, 1)}}
	s.intake = &intake{js: s.js, batches: h.batches, acks: h.acks, ids: submit.NewIDs(s.js), store: store, slots: s.slots,
		submitters: s.submitters, keys: s.keyOrders, repair: s.keyRepair, table: s.Table, now: now, log: log, tel: tel}
	s.inspect = &inspector{dlq: h.dlq, locks: h.locks, state: h.state, queues: h.queues, progress: progress, store: store,
		scheduled: s.scheduledBatches, table: s.Table, now: now}
	s.queueEdits = &queueEditor{js: s.js, locks: h.locks, state: h.state, queues: h.queues, progress: progress, store: store,
		inspect: s.inspect, scheduled: s.scheduledBatches, removal: s.removal, table: s.Table, now: now, log: log,
		build: s.intake.build, admit: s.keyOrders.admit}
	s.applier = &callbackApplier{js: s.js, nc: s.nc, acks: h.acks, consumer: h.callbacks, store: store, slots: s.slots,
		senders: s.senderPool, keys: s.keyOrders, table: s.Table, now: now, log: log, tel: tel,
		concurrency: s.opts.Concurrency, groups: callbackGroups(), backoff: s.opts.CallbackBackoff}
	s.deadLetters = &deadLetters{js: s.js, nc: s.nc, dlq: h.dlq, batches: h.batches, store: store, submitters: s.submitters,
		table: s.Table, now: now, log: log, tel: tel, admit: s.keyOrders.admit, apply: s.Apply}
	s.sched = &scheduler{schedules: h.schedules, store: store, table: s.Table, now: now, log: log, submit: s.intake.submit,
		wake: make(chan struct{}, 1), failures: map[string]int{}}
	s.keyOrders.repair = s.keyRepair
	s.scheduledBatches.startHead = s.keyOrders.startHead
}

// bindError says which resource New could not bind to, and matches
// ErrNotProvisioned when it does not exist.
func bindError(what string, err error) error {
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("%w: %s: %w", ErrNotProvisioned, what, err)
	}
	return fmt.Errorf("authz: %s: %w", what, err)
}

// watchDomains has the metrics report the queues of every domain of t,
// with the age of their oldest tokens, which authz may read.
func (s *Service) watchDomains(t *Table) {
	for _, l := range t.Labels {
		s.opts.Telemetry.WatchQueueFronts(s.js, l.Domain)
	}
}

// Table returns the authorization table in force.
func (s *Service) Table() *Table { return s.table.Load() }

// Reload reads the table again from Options.TablePath.
func (s *Service) Reload() error {
	if s.opts.TablePath == "" {
		return errors.New("authz: no table path to reload from")
	}
	t, err := LoadTable(s.opts.TablePath)
	if err != nil {
		return err
	}
	s.table.Store(t)
	s.watchDomains(t)
	s.sched.poke()
	s.log.Info("authorization table reloaded", "labels", len(t.Labels), "schedules", len(t.Schedules))
	return nil
}

// Run serves the API and applies callbacks until ctx is done, then drains:
// it leaves the queue group and stops taking callbacks, finishes the
// requests it took and applies the callbacks already delivered, answers
// every request that was already on its way "503 shutting down" (its caller
// tries again, and another replica answers), and returns only when no
// handler can run any more; it logs "authz stopped" then. Queue edits that
// an earlier replica left half done are finished first.
//
// Its background duties are loops, each started and then run until ctx is
// done, returning once what it took is drained: the repair loop
// (keyRepairer), the callback consumer, the forwarder of fired schedules
// and the scheduler. Once serving, it queues the batches recorded shortly
// before its start that a replica which died left queued nowhere
// (resumeRecent).
func (s *Service) Run(ctx context.Context) error {
	if err := s.queueEdits.resumeEdits(ctx); err != nil {
		return err
	}
	// The repair loop outlives ctx until the drain below is over: a send
	// drained after ctx ended may still hand it a batch or a key.
	repairCtx, stopRepairs := context.WithCancel(context.WithoutCancel(ctx))
	var repairErr error
	repairDone := make(chan struct{})
	s.keyRepair.repairs.setOpen(true)
	go func() { defer close(repairDone); repairErr = s.keyRepair.run(repairCtx) }()
	defer func() { stopRepairs(); <-repairDone }()
	s.keyOrders.resumeKeys(ctx)
	// What was recorded before this instant, this replica did not send.
	started := s.intake.now()
	stopRequests, err := s.serveRequests(ctx)
	if err != nil {
		return err
	}
	// The loops run until ctx is done, or until one fails to start.
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer stopLoops()
	var loops sync.WaitGroup
	errs := make(chan error, 5)
	stop := func() {
		stopLoops()
		stopRequests()
		loops.Wait()
		if err := drain.Delivered(s.nc, drain.Timeout); err != nil {
			s.log.Warn("requests may be left unanswered", "err", err)
		}
	}
	for _, l := range []loop{&callbackConsumer{applier: s.applier, consumer: s.applier.consumer},
		&dueForwarder{batches: s.scheduledBatches, due: s.scheduledBatches.due}} {
		if err := l.start(loopCtx); err != nil {
			stop()
			return err
		}
		loops.Go(func() { errs <- l.run(loopCtx) })
	}
	s.log.Info("authz serving", "owner", s.opts.Owner, "labels", len(s.Table().Labels))
	loops.Go(func() { s.presence.warnAtStart(loopCtx) })
	loops.Go(func() { s.resumeAtStart(loopCtx, started) })
	loops.Go(func() { errs <- s.sched.run(loopCtx) })
	loops.Go(func() { errs <- s.keeper.run(loopCtx) })
	<-ctx.Done()
	stop()
	s.log.Info("authz stopped")
	stopRepairs()
	<-repairDone
	close(errs)
	failed := []error{repairErr}
	for err := range errs {
		failed = append(failed, err)
	}
	return errors.Join(failed...)
}

// loop is a background duty of Run: start begins it, and run serves until
// ctx is done, then returns once what it took is drained.
type loop interface {
	start(ctx context.Context) error
	run(ctx context.Context) error
}

// serveRequests adds the service's endpoints; stop leaves the queue group
// and returns once the requests taken are answered.
func (s *Service) serveRequests(ctx context.Context) (stop func(), err error) {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        streams.AuthzService,
		Version:     Version,
		Description: "tickflow authorization: the only gate onto the queues",
		QueueGroup:  streams.AuthzService,
	})
	if err != nil {
		return nil, fmt.Errorf("authz: add service: %w", err)
	}
	// Requests and callbacks are handled off their subscriptions'
	// goroutines, a bounded number at once: one at a time capped a replica
	// at what one round trip after another allows. The gates admit them
	// until shutdown: micro's endpoint subscriptions are not reachable, so
	// refusing at the gate is what stops a request queued in the client
	// from running after Run.
	var requests drain.Gate
	reqWorkers := startFairPool(s.opts.Concurrency, callerShare(s.opts.Concurrency))
	stop = func() {
		if err := svc.Stop(); err != nil {
			s.log.Warn("service stop failed", "err", err)
		}
		requests.Close()
		requests.Wait()
		reqWorkers.stop()
	}
	for _, e := range s.endpoints() {
		doc := e.doc
		if e.ownerOnly {
			doc += " (owner)"
		}
		err := svc.AddEndpoint(e.name, micro.HandlerFunc(func(req micro.Request) {
			if !requests.Enter() {
				s.refuse(req)
				return
			}
			// Queued, never waited for here: a wait would hold up every
			// later request to this endpoint, whoever sent it.
			user, _, _ := streams.ParseAuthzSubject(req.Subject())
			limit := s.Table().limits(user, defaultMaxRequests(s.opts.Concurrency)).maxRequests
			if !reqWorkers.add(user, limit, func(release func()) {
				defer requests.Leave()
				s.serve(ctx, req, e, release)
			}) {
				requests.Leave()
				s.tooMany(req, user, limit)
			}
		}), micro.WithEndpointSubject(streams.AuthzSubject("*", e.name)),
			micro.WithEndpointMetadata(map[string]string{"description": doc}))
		if err != nil {
			stop()
			if err := drain.Delivered(s.nc, drain.Timeout); err != nil {
				s.log.Warn("requests may be left unanswered", "err", err)
			}
			return nil, fmt.Errorf("authz: endpoint %s: %w", e.name, err)
		}
	}
	return stop, nil
}

// refuse answers a request that arrived once shutdown began: 503, so its
// caller tries again rather than waiting out its timeout. Like serve, it
// answers only into the caller's own inbox.
func (s *Service) refuse(req micro.Request) {
	user, _, ok := streams.ParseAuthzSubject(req.Subject())
	if !ok || !streams.IsInboxOf(req.Reply(), user) {
		return
	}
	_ = streams.Reply(s.nc, req.Reply(), nil, strconv.Itoa(api.CodeUnavailable), "authz: shutting down; try again")
}

// tooMany answers a request its caller had no room for: 429, naming the
// bound, into the caller's own inbox only, as serve does.
func (s *Service) tooMany(req micro.Request, user string, limit int) {
	if !streams.IsInboxOf(req.Reply(), user) {
		return
	}
	_ = streams.Reply(s.nc, req.Reply(), nil, strconv.Itoa(api.CodeTooManyRequests),
		fmt.Sprintf("authz: too many requests in flight for %s (limit %d); try again", user, limit))
}

// defaultMaxRequests is the built-in Caller.MaxRequests: a quarter of the
// workers, so that no one caller's requests take them all.
func defaultMaxRequests(concurrency int) int { return max(concurrency/4, 1) }

// callerShare is how many workers one caller's requests may run on at
// once, whatever its MaxRequests: all but a quarter, left to the others.
func callerShare(concurrency int) int { return max(concurrency-concurrency/4, 1) }

// Error is an API error: a code and a message that says what was wrong.
type Error struct {
	Code    int
	Message string
}

func (e *Error) Error() string { return e.Message }

func errf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// asError is the API error err answers with: its own code when it is an
// *Error, 400 for a batch that breaks a rule, and 500, a failure inside
// authz, for anything else.
func asError(err error) *Error {
	var ae *Error
	var ve *pipeline.ValidationError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &ve):
		return &Error{Code: api.CodeBadRequest, Message: err.Error()}
	}
	return &Error{Code: api.CodeInternal, Message: err.Error()}
}

type endpoint struct {
	name, doc string
	// ownerOnly refuses every caller but the owner, before the body is read.
	ownerOnly bool
	handle    func(ctx context.Context, user string, body []byte) (any, error)
}

// op adapts a handler of a decoded request to an endpoint: the body must be
// one JSON object of type Req (decodeJSON's rules).
func op[Req any](h func(ctx context.Context, user string, req *Req) (any, error)) func(context.Context, string, []byte) (any, error) {
	return func(ctx context.Context, user string, body []byte) (any, error) {
		var req Req
		if err := decodeJSON(body, &req); err != nil {
			return nil, err
		}
		return h(ctx, user, &req)
	}
}

// jsonAppender is a reply that writes its own JSON, the bytes
// encoding/json would write; ok is false when it leaves that to
// encoding/json (api.SendReply.AppendJSON).
type jsonAppender interface {
	AppendJSON(b []byte) (out []byte, ok bool)
}

// serve handles one request on a worker; release gives back the request's
// place in its caller's limit, and is called just before every answer.
func (s *Service) serve(ctx context.Context, req micro.Request, e endpoint, release func()) {
	user, _, ok := streams.ParseAuthzSubject(req.Subject())
	if !ok {
		release()
		_ = streams.Reply(s.nc, req.Reply(), nil, strconv.Itoa(api.CodeBadRequest), "authz: request subjects are authz.<user>.<operation>")
		return
	}
	// Answer only into the caller's own inbox: a reply subject is chosen by
	// the caller, and authz may publish where callers may not (batches.>,
	// $KV.batches.>), so a crafted reply subject must not become a write.
	if !streams.IsInboxOf(req.Reply(), user) {
		s.log.Warn(streams.LogReplyRefused, "subject", logging.Capped(req.Subject()), "reply", logging.Capped(req.Reply()))
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var out any
	err := error(nil)
	if e.ownerOnly {
		err = s.owner(user)
	}
	if err == nil && s.holdRequest != nil {
		s.holdRequest(user, e.name)
	}
	if err == nil {
		var span trace.Span
		rctx, span = s.opts.Telemetry.StartRequest(rctx, e.name, user, nats.Header(req.Headers()))
		out, err = e.handle(rctx, user, req.Data())
		span.End()
	}
	if err != nil {
		ae := asError(err)
		if ae.Code == api.CodeInternal {
			s.log.Error("request failed", "subject", logging.Capped(req.Subject()), "err", logging.Cap(err.Error(), api.MaxErrorMessage))
		}
		release()
		_ = streams.Reply(s.nc, req.Reply(), nil, fmt.Sprint(ae.Code), logging.Cap(ae.Message, api.MaxErrorMessage))
		return
	}
	data, ok := []byte(nil), false
	if a, isAppender := out.(jsonAppender); isAppender {
		data, ok = a.AppendJSON(nil) // a hot reply, without reflection
	}
	if !ok {
		var err error
		if data, err = json.Marshal(out); err != nil {
			release()
			_ = streams.Reply(s.nc, req.Reply(), nil, strconv.Itoa(api.CodeInternal), "authz: encode reply: "+err.Error())
			return
		}
	}
	release()
	_ = streams.Reply(s.nc, req.Reply(), data, "", "")
}

// decodeJSON reads a request body into v: one JSON value (an empty body
// reads as {}), with no field v lacks and nothing after it. Errors are 400s
// that show at most a capped prefix of what the caller sent.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errf(api.CodeBadRequest, "authz: request body: %s", api.JSONProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return errf(api.CodeBadRequest, "authz: request body: trailing data after the JSON object (the body holds %d bytes)", len(body))
	}
	return nil
}

func (s *Service) owner(user string) error { return checkOwner(s.opts.Owner, user) }

// checkOwner refuses every user but owner.
func checkOwner(owner, user string) error {
	if user != owner {
		return errf(api.CodeForbidden, "authz: only the owner may do this (you are %q)", user)
	}
	return nil
}
