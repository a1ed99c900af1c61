// Package processor executes a domain's batches one step per tick: High
// before Med, an atomic batch as one unit, a non-atomic batch one function at
// a time with a rotation to the back of its queue after each, with retries,
// confirmations, expiry, dead letters and exactly one terminal callback.
//
// The queue message is a token; the progress record is the truth. Every
// state change is written to the progress bucket before the token is
// acknowledged, and every publish carries a deduplication id, so a processor
// may die between any two steps and its successor repeats nothing.
package processor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// Defaults of Options: New puts them in the fields left zero, and
// config.DefaultProcessor starts from them.
const (
	// DefaultName is the default of Options.Name.
	DefaultName = "processor"
	// DefaultConcurrency is the default of Options.Concurrency.
	DefaultConcurrency = 128
	// DefaultMaxSteps is the default of Options.MaxSteps.
	DefaultMaxSteps = 256
	// DefaultWorkTimeout is the default of Options.WorkTimeout.
	DefaultWorkTimeout = 10 * time.Second
	// DefaultMaxWait is the default of Options.MaxWait.
	DefaultMaxWait = time.Hour
	// DefaultPoisonRetries is the default of Options.PoisonRetries.
	DefaultPoisonRetries = 12
	// DefaultSenderWait is the default of Options.SenderWait.
	DefaultSenderWait = 500 * time.Millisecond
)

// Options configure a Processor. The zero value of each field means its default.
type Options struct {
	// Domain is the domain served. Required.
	Domain string
	// Name identifies this replica in logs and callbacks. Default
	// DefaultName ("processor").
	Name string
	// Concurrency bounds the steps one tick runs at once, and the steps
	// each tick of the ready pace asks for. Default DefaultConcurrency
	// (128).
	Concurrency int
	// MaxSteps caps the steps one tick may ask for. Default
	// DefaultMaxSteps (256).
	MaxSteps int
	// WorkTimeout bounds one worker request. Default DefaultWorkTimeout
	// (10s).
	WorkTimeout time.Duration
	// MaxWait bounds how long a step may go without any worker attempting
	// its call: every worker busy, none answering within WorkTimeout, or
	// none serving the function's type. Such a step is tried again with a
	// growing delay (250ms to 10s) and counts no attempt of the function;
	// past MaxWait the function fails permanently (then its fallback, then
	// a dead letter). Each replica measures it from the first time it saw
	// the step unattempted, in memory. A batch's expiry bounds it too.
	// Default DefaultMaxWait (1h).
	MaxWait time.Duration
	// PoisonRetries bounds the retries of a token that cannot be
	// reconciled with its batch's records (a token ahead of its progress, a
	// progress or batch record that does not decode), tried again with a
	// delay from 250ms doubling to 1m in case the records catch up. After
	// that the batch is finished failed with a dead letter naming the
	// reason. Default DefaultPoisonRetries (12, about 5 minutes).
	PoisonRetries int
	// Pace says what makes the processor take steps while Run runs:
	// PaceReady (the default) ticks itself back to back while ready
	// tokens exist and waits on the server when none do, besides the ticks
	// it serves; PaceTick takes steps only when ticked.
	Pace Pace
	// IdleWait bounds one wait on the server of an idle replica in the
	// ready pace: the server ends the wait as soon as a token is ready, and
	// a wait that ends empty is followed by a look at the queues and a new
	// wait. Default DefaultIdleWait (1s).
	IdleWait time.Duration
	// Throttle, when positive, caps the domain's steps per second across
	// every replica given the same value, ticks from outside included: the
	// replicas draw from one budget per second kept in the locks bucket, so
	// it holds across processes and restarts. Default 0: none.
	Throttle int
	// Senders names the domain's sender pool: a batch with a function
	// that needs a sender holds one of them from its first step until it
	// is terminal. Default none (such a batch fails at its first step).
	Senders []string
	// SenderWait is how soon a batch that found every sender leased looks
	// again. Default DefaultSenderWait (500ms).
	SenderWait time.Duration
	// SenderShare is the most senders of the pool that one submitter's
	// batches hold at once; a batch of a submitter at its share waits as
	// for a free sender. Default: all but one of the pool (no bound for a
	// pool of one), so one submitter never holds every sender.
	SenderShare int
	// Logger receives the processor's logs. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Rand draws jitter in [0, 1). Default math/rand/v2.Float64.
	Rand func() float64
	// fault, when set, is called at each crash point of a step; a non-nil
	// error abandons the step right there, as if the process died. Only
	// the package's tests set it (export_test.go): it is no option.
	fault func(point string) error
	// Telemetry receives the processor's metrics, readiness and spans.
	// Default nil: none.
	Telemetry *telemetry.Telemetry
}

// Crash points passed to Options.fault, named by the crash-point tests.
const (
	// faultAfterWork: the worker answered, nothing written yet.
	faultAfterWork = "after-work"
	// faultAfterProgress: progress written, token neither rotated nor acknowledged.
	faultAfterProgress = "after-progress"
	// faultAfterRequeue: the rotated token is published, the old one not acknowledged.
	faultAfterRequeue = "after-requeue"
	// faultAfterDeadLetter: terminal progress and dead letter written, no callback yet.
	faultAfterDeadLetter = "after-dead-letter"
	// faultAfterCallback: the callback is published, the token not acknowledged.
	faultAfterCallback = "after-callback"
	// faultAfterCallbackGroup: a message of callbacks (a group, or a lone
	// one) is stored, the tokens of its members not acknowledged.
	faultAfterCallbackGroup = "after-callback-group"
)

// errCrash marks a step abandoned by Options.fault.
var errCrash = errors.New("processor: step abandoned (fault injected)")

// Processor serves one domain. It is safe for concurrent use; any number of
// replicas may serve the same domain.
type Processor struct {
	opts    Options
	log     *slog.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	queues  map[pipeline.Priority]*jsapi.Fetcher
	confirm jetstream.Consumer
	state   jetstream.KeyValue

	// steps runs the steps, each on a goroutine of runner.
	steps  *stepper
	runner *stepRunner

	// confirms applies the confirmations.
	confirms *confirmations

	// waker serves WaitWork.
	waker waker

	// pacer ticks the processor in the ready pace.
	pacer *pacer

	// throttle caps the domain's steps per second; nil: no cap.
	throttle *throttle
}

// New binds a processor to its domain's consumers and buckets, which must
// have been provisioned (streams.Provision).
func New(ctx context.Context, nc *nats.Conn, opts Options) (*Processor, error) {
	if err := pipeline.ValidateDomain(opts.Domain); err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	if opts.Name == "" {
		opts.Name = DefaultName
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultConcurrency
	}
	if opts.MaxSteps <= 0 {
		opts.MaxSteps = DefaultMaxSteps
	}
	if opts.WorkTimeout <= 0 {
		opts.WorkTimeout = DefaultWorkTimeout
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.PoisonRetries <= 0 {
		opts.PoisonRetries = DefaultPoisonRetries
	}
	pace, err := ParsePace(string(opts.Pace))
	if err != nil {
		return nil, err
	}
	opts.Pace = pace
	if opts.IdleWait <= 0 {
		opts.IdleWait = DefaultIdleWait
	}
	if opts.Throttle < 0 {
		return nil, fmt.Errorf("%w (got %d)", ErrThrottle, opts.Throttle)
	}
	if opts.SenderWait <= 0 {
		opts.SenderWait = DefaultSenderWait
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(pubAckTimeout))
	if err != nil {
		return nil, err
	}
	p := &Processor{
		opts: opts, nc: nc, js: js,
		log:    opts.Logger.With("domain", opts.Domain, "processor", opts.Name),
		queues: map[pipeline.Priority]*jsapi.Fetcher{}, runner: newStepRunner(stepIdle),
		waker: waker{nc: nc, domain: opts.Domain},
	}
	workers := &workClient{nc: nc, timeout: opts.WorkTimeout}
	s := &stepper{
		opts: opts, log: p.log,
		workers: workers,
		units:   &unitBatcher{workers: workers, tel: opts.Telemetry},
		limits:  recordLimits{maxPayload: nc.MaxPayload},
		fault:   crashPoints(opts.fault),
	}
	p.steps = s
	p.confirms = &confirmations{steps: s, log: p.log, streams: map[pipeline.Priority]jetstream.Stream{}}
	name := streams.ProcessorConsumer(opts.Domain)
	for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		c, err := js.Consumer(ctx, streams.QueueStream(prio), name)
		if err != nil {
			return nil, fmt.Errorf("processor: consumer %s on %s (provision the domain first): %w", name, streams.QueueStream(prio), err)
		}
		p.waker.keepFor(c.CachedInfo().Config.AckWait)
		p.queues[prio] = jsapi.NewFetcher(nc, streams.QueueStream(prio), name, 0)
		qs, err := js.Stream(ctx, streams.QueueStream(prio))
		if err != nil {
			return nil, fmt.Errorf("processor: stream %s: %w", streams.QueueStream(prio), err)
		}
		p.confirms.streams[prio] = qs
	}
	if p.confirm, err = js.Consumer(ctx, streams.StreamConfirm, name); err != nil {
		return nil, fmt.Errorf("processor: consumer %s on %s: %w", name, streams.StreamConfirm, err)
	}
	var progress, batches, senders jetstream.KeyValue
	for _, b := range []struct {
		name string
		kv   *jetstream.KeyValue
	}{{streams.BucketProgress, &progress}, {streams.BucketBatches, &batches}, {streams.BucketDomainStates, &p.state}, {streams.BucketSenders, &senders}} {
		if *b.kv, err = js.KeyValue(ctx, b.name); err != nil {
			return nil, fmt.Errorf("processor: bucket %s: %w", b.name, err)
		}
	}
	s.cache = &batchCache{kv: batches, m: map[uint64]*pipeline.Batch{}}
	s.senders = &senderPool{kv: senders, names: opts.Senders, limit: opts.SenderShare, holder: opts.Name, now: opts.Now, log: p.log}
	s.inc = &inclusions{steps: s, workers: workers, senders: s.senders, limits: s.limits, now: opts.Now, rand: opts.Rand, log: p.log}
	s.store = streams.NewProgressStore(progress, p.opts.Now)
	retention, err := streams.ReadRetention(ctx, progress)
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	s.store.Expire(js, retention)
	if opts.Throttle > 0 {
		locks, err := js.KeyValue(ctx, streams.BucketLocks)
		if err != nil {
			return nil, fmt.Errorf("processor: bucket %s: %w", streams.BucketLocks, err)
		}
		p.throttle = &throttle{store: streams.NewThrottleStore(locks, p.opts.Now), domain: opts.Domain, limit: opts.Throttle, now: p.opts.Now}
	}
	async, err := jsapi.NewAckPublisher(nc, pubAckTimeout)
	if err != nil {
		return nil, fmt.Errorf("processor: %w", err)
	}
	s.pub = &publisher{js: js, async: async, limits: s.limits, domain: opts.Domain, name: opts.Name, now: opts.Now, log: p.log, fault: s.fault}
	s.pub.groups = &callbackGrouper{async: async, domain: opts.Domain, maxBytes: int(nc.MaxPayload()) - callbackGroupHeadroom, fault: s.fault}
	p.pacer = &pacer{
		tick: func(ctx context.Context, steps int) (api.TickReport, bool) { return p.tick(ctx, steps, true) }, waitWork: p.WaitWork, untilNext: p.throttle.untilNext, sleep: sleep,
		steps: opts.Concurrency, idleWait: opts.IdleWait, log: p.log,
	}
	p.observe(nc)
	return p, nil
}

// Run serves ticks and confirmations until ctx is done and, in the ready
// pace (Options.Pace), ticks itself while ready work exists. Then it
// drains: it stops taking ticks, lets the ticks in progress run their
// steps to the end, answers the ticks already on their way "503 shutting
// down" (the next tick goes to another replica), applies the confirmations
// already delivered, and returns only when no tick or confirmation handler
// can run any more.
func (p *Processor) Run(ctx context.Context) error {
	// A closed gate refuses what a drained subscription still delivers, and
	// admits nothing that Wait could miss.
	var ticks, confirms drain.Gate
	// shuttingDown answers a tick that arrives while the processor stops.
	const shuttingDown = "processor: shutting down"
	sub, err := p.nc.QueueSubscribe(streams.TickSubject(p.opts.Domain), streams.TickQueueGroup(p.opts.Domain), func(m *nats.Msg) {
		// Anyone may tick, and the reply subject is theirs to choose: a tick
		// whose reply is not an inbox is refused whole, before it runs.
		if err := streams.CheckReply(m.Reply); err != nil {
			p.log.Warn(streams.LogReplyRefused, "subject", m.Subject, "reply", logging.Capped(m.Reply))
			return
		}
		if !ticks.Enter() {
			body, _ := json.Marshal(map[string]string{"error": shuttingDown})
			_ = streams.Reply(p.nc, m.Reply, body, streams.CodeStopping, shuttingDown)
			return
		}
		defer ticks.Leave()
		var body []byte
		steps, err := ParseTick(m.Data)
		if err != nil {
			p.log.Warn("bad tick", "err", err)
			body, _ = json.Marshal(map[string]string{"error": err.Error()})
		} else {
			body, _ = json.Marshal(p.Tick(ctx, steps))
		}
		if err := streams.Reply(p.nc, m.Reply, body, "", ""); err != nil {
			p.log.Debug("tick report not sent", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("processor: subscribe ticks: %w", err)
	}
	closed := drain.Watch(sub)
	cc, err := p.confirm.Consume(func(m jetstream.Msg) {
		// Refused only once the consumer has closed, with its connection:
		// the confirmation is redelivered after AckWait.
		if !confirms.Enter() {
			return
		}
		defer confirms.Leave()
		p.confirms.handle(ctx, m)
	})
	if err != nil {
		_ = sub.Unsubscribe()
		ticks.Close()
		ticks.Wait()
		return fmt.Errorf("processor: consume confirmations: %w", err)
	}
	paced := make(chan struct{})
	if p.opts.Pace == PaceReady {
		go func() {
			defer close(paced)
			p.pacer.run(ctx)
		}()
	} else {
		close(paced)
	}
	// The presence record tells authz that the domain is served; it is
	// deleted as the processor stops.
	present := make(chan struct{})
	go func() {
		defer close(present)
		key := streams.ProcessorPresenceKey(p.opts.Domain, p.opts.Name, streams.PresenceInstance())
		streams.KeepPresence(ctx, p.js, key, records.Presence{
			Name: p.opts.Name, Kind: records.PresenceProcessor, Domains: []string{p.opts.Domain}, Since: time.Now().UTC(),
		}, p.log)
	}()
	p.log.Info("processor serving", "tick", streams.TickSubject(p.opts.Domain), "pace", string(p.opts.Pace), "throttle", p.opts.Throttle)
	<-ctx.Done()
	<-present
	<-paced
	p.waker.close()
	if err := sub.Drain(); err != nil {
		p.log.Warn("tick subscription not drained", "err", err)
	}
	cc.Drain()
	ticks.Close()
	ticks.Wait()
	// A draining consumer closes once its handler has returned for every
	// message it held.
	<-cc.Closed()
	confirms.Close()
	confirms.Wait()
	// Every tick has ended, and with it every token waiting for a callback's
	// message: what is still flying carries none.
	p.steps.pub.groups.wait()
	if err := drain.Closed(sub, closed, drain.Timeout); err != nil {
		p.log.Warn("ticks may be left unanswered", "err", err)
	}
	return nil
}

// maxTickBody bounds a tick's body: a step count needs a few bytes, and a
// tick may come from anyone.
const maxTickBody = 64

// ParseTick reads a tick's body: empty (one step), a number, or JSON {"steps": n}.
func ParseTick(body []byte) (int, error) {
	if len(body) > maxTickBody {
		return 0, fmt.Errorf("processor: tick body of %d bytes: expected a step count or {\"steps\": n} of at most %d bytes", len(body), maxTickBody)
	}
	s := strings.TrimSpace(string(body))
	if s == "" {
		return 1, nil
	}
	if strings.HasPrefix(s, "{") {
		var v struct {
			Steps int `json:"steps"`
		}
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			return 0, fmt.Errorf("processor: tick body %q: expected a step count or {\"steps\": n}: %w", s, err)
		}
		s = strconv.Itoa(v.Steps)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("processor: tick body %q: expected a step count ≥ 1", s)
	}
	return n, nil
}

// Paused reports whether the domain is paused.
func (p *Processor) Paused(ctx context.Context) (bool, error) {
	e, err := p.state.Get(ctx, p.opts.Domain)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	st, err := records.DecodeDomainState(e.Value())
	if err != nil {
		return false, err
	}
	return st.Paused, nil
}

// pausedNow is Paused, read by a tick before it takes work. A paused
// domain's replica gives the tokens its waits were given back to the
// queue, for whichever replica runs them after the pause.
func (p *Processor) pausedNow(ctx context.Context) (bool, error) {
	paused, err := p.Paused(ctx)
	if paused {
		p.waker.release()
	}
	return paused, err
}

// Tick runs up to steps steps: batches from HIGH first, then from MED, at
// most Options.Concurrency at once, and no more than the domain's throttle
// (Options.Throttle) leaves of the current second.
func (p *Processor) Tick(ctx context.Context, steps int) api.TickReport {
	rep, _ := p.tick(ctx, steps, false)
	return rep
}

// tick is Tick, and also says whether the tick ran its queues dry: it
// ended because a fetch from every queue came back empty with no step of
// it running, so no token was ready then (none taken by this tick, none
// put back by its steps). The ready pace waits for work after such a
// tick rather than ticking again to find the queues empty once more.
//
// A tick whose queues held fewer tokens than it could take waits for one
// of its steps to end before it looks again. In the ready pace's own ticks
// (watch) it also looks again as soon as the server says a token became
// ready (the waker), so a slow step does not hold up work that arrives
// meanwhile; a tick from outside is one round of the outside clock.
func (p *Processor) tick(ctx context.Context, steps int, watch bool) (rep api.TickReport, dry bool) {
	rep = api.TickReport{Domain: p.opts.Domain, Status: api.TickOK}
	steps = min(max(steps, 1), p.opts.MaxSteps)
	paused, err := p.pausedNow(ctx)
	if err != nil {
		rep.Status, rep.Error = api.TickError, err.Error()
		return rep, false
	}
	if paused {
		rep.Status = api.TickPaused
		return rep, false
	}
	pauseRead := time.Now()
	// A sliding window: up to Concurrency steps run at once, and free
	// slots are refilled as steps end (a quarter of the window at a time,
	// so a fetch is not spent on every single slot), instead of waiting
	// for the slowest step of each round.
	var (
		mu      sync.Mutex
		freed   = sync.NewCond(&mu)
		running int
		wg      sync.WaitGroup
	)
	refill := max(1, p.opts.Concurrency/4)
	// A step's last write is published asynchronously; its token is
	// acknowledged here when the write is stored (deferred).
	acks := startAcker(p.log, &mu, &rep)
	// The queues whose consumer left a fetch unanswered: not asked again
	// this tick (each such fetch waits a second).
	silent := map[pipeline.Priority]bool{}
	throttled := false
	// awaitStep waits, with mu held, until a step running ends or, when
	// the tick watches, the waker says a token may be ready (woken) in a
	// queue this tick still asks (not one left silent: HIGH at
	// MaxAckPending answers as soon as an acknowledgement frees a place,
	// and this tick would not fetch it, so it would only wake again and
	// again).
	//
	// A wake whose look finds nothing (another replica took the token, or
	// the server answers at once for another reason) is fruitless; after
	// maxFruitlessWakes in a row the tick waits for a step alone, so no
	// answer can make it spin.
	fruitless, woke := 0, false
	awaitStep := func() (woken bool) {
		n := len(rep.Steps)
		var prios []pipeline.Priority
		if watch && fruitless < maxFruitlessWakes {
			for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
				if !silent[prio] {
					prios = append(prios, prio)
				}
			}
		}
		if len(prios) > 0 {
			ch, stop, err := p.waker.watch(p.opts.IdleWait, prios...)
			if err != nil {
				p.log.Debug("no watch for work while steps run", "err", err)
			} else {
				done := make(chan struct{})
				defer func() { close(done); stop() }()
				go func() {
					select {
					case <-ch:
						mu.Lock()
						woken = true
						freed.Broadcast()
						mu.Unlock()
					case <-done:
					}
				}()
			}
		}
		for len(rep.Steps) == n && running > 0 && !woken {
			freed.Wait()
		}
		return woken
	}
	for taken := 0; taken < steps && ctx.Err() == nil; { // stopping: take no more
		mu.Lock()
		for running > 0 && p.opts.Concurrency-running < min(refill, steps-taken) {
			freed.Wait()
		}
		want := min(p.opts.Concurrency-running, steps-taken)
		mu.Unlock()
		if time.Since(pauseRead) >= pauseRecheck {
			// A tick that lasts (a slow step running, work arriving
			// beside it) reads the pause again before it takes more, so
			// that a pause stops it within pauseRecheck, not at its end.
			paused, err := p.pausedNow(ctx)
			if err != nil || paused {
				break // what runs, ends; the next tick says why
			}
			pauseRead = time.Now()
		}
		granted, second, err := p.throttle.take(ctx, want)
		if err != nil {
			rep.Status, rep.Error = api.TickError, err.Error()
			break
		}
		if granted == 0 {
			// This second's budget is spent: the steps running end, and
			// the next tick takes from the next second's.
			throttled = true
			p.opts.Telemetry.Throttled(p.opts.Domain)
			break
		}
		msgs, err := p.fetch(silent, granted)
		switch {
		case len(msgs) > 0:
			fruitless = 0
		case woke:
			fruitless++
		}
		woke = false
		if unused := granted - len(msgs); p.throttle != nil && unused > 0 {
			if err := p.throttle.giveBack(context.WithoutCancel(ctx), second, unused); err != nil {
				p.log.Debug("unused throttle budget not given back", "err", err)
			}
		}
		if err != nil {
			rep.Status, rep.Error = api.TickError, err.Error()
			break
		}
		if len(msgs) == 0 {
			mu.Lock()
			idle := running == 0
			if !idle {
				// Steps in flight may rotate batches back into the queue:
				// look again once one ends.
				woke = awaitStep()
			}
			mu.Unlock()
			if idle {
				// Every queue asked came back empty; a queue left
				// unanswered (silent) was not asked, and may hold more.
				dry = len(silent) == 0
				break
			}
			continue
		}
		taken += len(msgs)
		mu.Lock()
		running += len(msgs)
		mu.Unlock()
		// A step, once its token is fetched, runs to the end even if ctx
		// ends: shutdown drains rather than abandons.
		for _, m := range msgs {
			wg.Add(1)
			p.runner.run(func() {
				defer wg.Done()
				d := &deferred{Msg: m.msg}
				sr := p.observedStep(context.WithoutCancel(ctx), m.prio, d)
				mu.Lock()
				rep.Steps = append(rep.Steps, sr)
				i := len(rep.Steps) - 1
				running--
				freed.Broadcast()
				mu.Unlock()
				acks.add(d, i)
			})
		}
		if len(msgs) < granted {
			// The queues held fewer ready tokens than asked for: look
			// again once a step ends (which may rotate its batch back),
			// not at once, as after an empty fetch.
			mu.Lock()
			woke = awaitStep()
			mu.Unlock()
		}
	}
	wg.Wait()
	acks.close()
	if len(rep.Steps) == 0 && rep.Status == api.TickOK {
		rep.Status = api.TickNoMessages
		if throttled {
			rep.Status = api.TickThrottled
		}
	}
	return rep, dry && rep.Status != api.TickError
}

// pauseRecheck is how long a tick runs on the pause state it read at its
// start before it reads it again, ahead of its next fetch.
const pauseRecheck = 100 * time.Millisecond

// maxFruitlessWakes bounds the wakes in a row whose look found nothing
// after which a tick stops watching the queues while its steps run.
const maxFruitlessWakes = 8

// full reports whether the consumer of prio's queue holds as many tokens
// as its MaxAckPending lets it: the one reason the server leaves a fetch
// unanswered on purpose. A fetch that fell silent for another reason (a
// server slower than the silence, an answer lost with the connection), or
// a consumer that cannot be read, is not full.
func (p *Processor) full(prio pipeline.Priority) bool {
	ctx, cancel := context.WithTimeout(context.Background(), jsapi.DefaultFetchSilence)
	defer cancel()
	c, err := p.js.Consumer(ctx, streams.QueueStream(prio), streams.ProcessorConsumer(p.opts.Domain))
	if err != nil {
		return false
	}
	info := c.CachedInfo()
	return info.Config.MaxAckPending > 0 && info.NumAckPending >= info.Config.MaxAckPending
}

type fetched struct {
	prio pipeline.Priority
	msg  jetstream.Msg
}

// fetch takes up to n tokens, from HIGH first and only then from MED: a
// queue's tokens delivered to the waker's request first, then from its
// consumer, skipping a consumer that said, as it delivered the last of
// those, that it held no other, and a queue the waker knows to have no
// ready token (quiet). A
// queue that fails, or that its consumer leaves unanswered (HIGH holding
// as many tokens as MaxAckPending lets it, parked batches among them), does
// not keep the tick from the other: the error is returned only when
// nothing was taken. A queue left unanswered is marked in silent, and a
// queue marked there is not asked.
func (p *Processor) fetch(silent map[pipeline.Priority]bool, n int) ([]fetched, error) {
	var out []fetched
	var errs []error
	for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		if len(out) >= n {
			break
		}
		// Tokens the server delivered to this replica's waiting request
		// first; the consumer said whether it held more.
		kept, more := p.waker.take(prio, n-len(out))
		for _, m := range kept {
			out = append(out, fetched{prio: prio, msg: m})
		}
		if !more || len(out) >= n || silent[prio] || p.waker.quiet(prio) {
			continue
		}
		msgs, err := p.queues[prio].FetchNoWait(n - len(out))
		for _, m := range msgs {
			out = append(out, fetched{prio: prio, msg: m})
		}
		switch {
		case err == nil:
		case errors.Is(err, jsapi.ErrFetchNoAnswer):
			// Nothing more from this queue now; not a failure.
			silent[prio] = true
			p.log.Debug("a queue's consumer left a fetch unanswered", "priority", prio, "taken", len(msgs), "err", err)
			if prio == pipeline.High && !p.full(prio) {
				// HIGH is slow to answer (a loaded server), not full: its
				// tokens may be on their way, so MED waits for the next
				// tick rather than overtaking them.
				silent[pipeline.Med] = true
			}
		default:
			errs = append(errs, fmt.Errorf("processor: %s: %w", prio, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		if len(out) == 0 {
			return nil, err
		}
		// Run what was taken; the next fetch meets the error again.
		p.log.Warn("a fetch failed; the tokens taken run", "taken", len(out), "err", err)
	}
	return out, nil
}
