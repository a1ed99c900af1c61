package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"

	tfconfig "github.com/tickflow/tickflow/config"
)

// envSpec is what a tickflow scenario runs: replicas of each role, on one
// server or on a cluster of nodes.
type envSpec struct {
	processors, authz, workers int
	nodes                      int // 0: one server, in-process connections
	// pace is the processors' Options.Pace: what they do while Run runs
	// (startTicker); "" is the default, the ready pace. Back-to-back
	// ticking calls Tick and never Run, so it does not matter there.
	pace processor.Pace
	// throttle is the processors' Options.Throttle: steps per second of
	// the domain across its replicas; 0: none.
	throttle int
	// shipped runs the components with their own defaults (processor
	// Concurrency and MaxSteps, worker Concurrency) instead of the bench's
	// -concurrency, -tick-steps and -worker-concurrency.
	shipped bool
}

// concurrency, maxSteps and workerConcurrency are the settings sp runs with.
func (c *config) concurrencyOf(sp envSpec) int {
	if sp.shipped {
		return processor.DefaultConcurrency
	}
	return c.concurrency
}

func (c *config) maxStepsOf(sp envSpec) int {
	if sp.shipped {
		return processor.DefaultMaxSteps
	}
	return c.tickSteps
}

func (c *config) workerConcurrencyOf(sp envSpec) int {
	if sp.shipped {
		return worker.DefaultConcurrency
	}
	return c.workerConcurrency()
}

// spec is the configuration the fixed phases measure.
func (c *config) spec() envSpec {
	return envSpec{processors: c.processors, authz: c.authzReplicas, workers: c.workerCount(c.processors)}
}

// tickflowEnv starts a server with authz, the workers and the processors of
// the configuration, not ticking yet.
func tickflowEnv(cfg *config) (*env, *nats.Conn, error) {
	return tickflowEnvOf(cfg, cfg.spec())
}

// tickflowEnvOf starts a server (or a cluster) with the replicas sp asks
// for, not ticking yet, and connects alice.
func tickflowEnvOf(cfg *config, sp envSpec) (*env, *nats.Conn, error) {
	var e *env
	var err error
	if sp.nodes > 0 {
		e, err = startClusterEnv(cfg, sp.nodes)
	} else {
		e, err = startEnv(cfg, false)
	}
	if err != nil {
		return nil, nil, err
	}
	if err := e.startAuthz(sp.authz); err != nil {
		e.close()
		return nil, nil, err
	}
	if err := e.startWorkers(sp.workers, cfg.workerConcurrencyOf(sp)); err != nil {
		e.close()
		return nil, nil, err
	}
	if err := e.newProcessors(sp.processors, processor.Options{
		Concurrency: cfg.concurrencyOf(sp), MaxSteps: cfg.maxStepsOf(sp), Pace: sp.pace, Throttle: sp.throttle,
	}); err != nil {
		e.close()
		return nil, nil, err
	}
	alice, err := e.connect("alice")
	if err != nil {
		e.close()
		return nil, nil, err
	}
	return e, alice, nil
}

// burnResult is one burn-down: how fast batches went in, and how fast they
// were drained (to the terminal callback applied by authz), and the CPU the
// bench process (every component and the servers) used for each.
type burnResult struct {
	submitRate float64 // batches/s through authz
	drainRate  float64 // batches (or functions) per second, to callback applied
	procRate   float64 // the same, to callback published by the processor
	submitCPU  float64 // CPU-seconds of the process while submitting
	drainCPU   float64 // CPU-seconds of the process while draining
	idleCores  float64 // cores the process used once drained (burnOptions.idleFor)
	submitDur  time.Duration
	drainDur   time.Duration // to the last callback applied
	// counts, with burnOptions.count, are the account's JetStream counts
	// before the submit, between the submit and the drain, and after the
	// drain.
	counts [3]jsCounts
}

// burnOptions say how a burn-down runs.
type burnOptions struct {
	spec      envSpec
	label     string
	functions int // no-op functions per batch
	n         int // batches
	units     int // what the drain rate counts per batch: 1 for batches, functions for function throughput
	profile   bool
	// tickEvery, when set, drives the processors with the real ticker
	// (every tickEvery, asking for tickerSteps steps) instead of back to back.
	tickEvery   time.Duration
	tickerSteps int
	// idleFor, when set, measures the CPU the process uses for this long
	// once the drain is over, the processors and the ticker still running.
	idleFor time.Duration
	// keys, when set, gives batch i the key "k<i mod keys>" (keyed.go).
	keys int
	// sendMany, when set, submits with send_many, this many batches a
	// request (submitMany), instead of one Send a batch.
	sendMany int
	// count reads the account's JetStream counts (cost.go) around the
	// submit and the drain, outside their timed windows.
	count bool
}

// runBurnDown submits o.n batches of o.functions no-op functions each under
// o.label, then drives the processors (back to back, or by the ticker)
// until authz has applied every terminal callback.
func runBurnDown(cfg *config, o burnOptions) (burnResult, error) {
	var r burnResult
	profile, n := o.profile, o.n
	e, alice, err := tickflowEnvOf(cfg, o.spec)
	if err != nil {
		return r, err
	}
	defer e.close()
	stopProfile := func() {}
	if profile && cfg.cpuprofile != "" {
		if stopProfile, err = startCPUProfile(cfg.cpuprofile); err != nil {
			return r, err
		}
	}
	defer func() { stopProfile() }()
	if profile && cfg.memprofile != "" {
		// The allocs profile is cumulative: this snapshot is the base to
		// subtract (go tool pprof -base).
		if err := writeHeapProfile(cfg.memprofile + ".base"); err != nil {
			return r, err
		}
	}

	if o.count {
		if r.counts[0], err = settledCounts(e); err != nil {
			return r, err
		}
	}
	var tsub time.Duration
	cpu0 := selfBusy()
	withRole("alice", func() {
		if o.keys > 0 {
			tsub, err = submitKeyed(e.ctx, alice, o.label, o.functions, n, cfg.inflight, o.keys)
			return
		}
		if o.sendMany > 0 {
			tsub, err = submitMany(e.ctx, alice, o.label, o.functions, n, o.sendMany, sendManyInflight(cfg.inflight, n, o.sendMany))
			return
		}
		tsub, err = submitAll(e.ctx, alice, o.label, o.functions, n, cfg.inflight, nil)
	})
	if err != nil {
		return r, err
	}
	r.submitCPU = selfBusy() - cpu0
	if o.count {
		if r.counts[1], err = settledCounts(e); err != nil {
			return r, err
		}
	}
	if profile && cfg.memprofile != "" {
		// The allocations up to the drain's start: the submit's are this
		// less <file>.base, the drain's <file> less this.
		if err := writeHeapProfile(cfg.memprofile + ".submit"); err != nil {
			return r, err
		}
	}
	// The submit phase has profiles of its own: <file>.submit, and with
	// -mutexprofile <file>.submit.mutex and <file>.submit.block, the base
	// to subtract from the drain's cumulative ones (go tool pprof -base).
	stopProfile()
	if profile && cfg.cpuprofile != "" {
		if err := os.Rename(cfg.cpuprofile, cfg.cpuprofile+".submit"); err != nil {
			return r, err
		}
		for _, p := range []string{".mutex", ".block"} {
			if err := os.Rename(cfg.cpuprofile+p, cfg.cpuprofile+".submit"+p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return r, err
			}
		}
		if stopProfile, err = startCPUProfile(cfg.cpuprofile); err != nil {
			return r, err
		}
	}
	cpu0 = selfBusy()
	start := time.Now()
	if o.tickEvery > 0 {
		if err := e.startTicker(o.tickEvery, o.tickerSteps); err != nil {
			return r, err
		}
	} else {
		e.startTicking(cfg.maxStepsOf(o.spec), cfg.idle)
	}
	tproc, tapp, err := e.waitCallbacks(start, uint64(n), cfg.stall)
	r.drainCPU = selfBusy() - cpu0
	if err == nil && o.idleFor > 0 {
		// Let the last steps' acknowledgements settle, then measure.
		time.Sleep(time.Second)
		c0, t0 := selfBusy(), time.Now()
		time.Sleep(o.idleFor)
		r.idleCores = (selfBusy() - c0) / time.Since(t0).Seconds()
	}
	e.stopTicking()
	if err != nil {
		return r, err
	}
	stopProfile()
	stopProfile = func() {}
	if profile && cfg.memprofile != "" {
		if err := writeHeapProfile(cfg.memprofile); err != nil {
			return r, err
		}
	}
	if cfg.verbose && o.tickEvery == 0 {
		ts := &e.tickStats
		busyTicks := ts.ticks - ts.idle
		logf("  ticks %d (idle %d), %.1f steps per busy tick, %.2f ms per busy tick, errors %d (last: %q)", ts.ticks, ts.idle,
			float64(ts.steps)/float64(max(busyTicks, 1)), float64(ts.busy.Microseconds())/1000/float64(max(busyTicks, 1)), ts.errors, ts.lastErr)
	}
	if err := checkClean(e, n); err != nil {
		return r, err
	}
	if o.count {
		if r.counts[2], err = settledCounts(e); err != nil {
			return r, err
		}
	}
	r.submitRate = float64(n) / tsub.Seconds()
	r.drainRate = float64(n*o.units) / tapp.Seconds()
	r.procRate = float64(n*o.units) / tproc.Seconds()
	r.submitDur, r.drainDur = tsub, tapp
	return r, nil
}

func writeHeapProfile(path string) error {
	// The in-use figures are as of the last collection: one now makes
	// them this moment's live heap.
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// checkClean verifies the burn-down did what it claims: n callbacks, all
// applied (CALLBACKS removes each once authz acknowledged it), no dead
// letters, empty queues.
func checkClean(e *env, n int) error {
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	if published, applied, err := e.callbackProgress(ctx); err != nil {
		return err
	} else if published != uint64(n) || applied != uint64(n) {
		return fmt.Errorf("after the burn-down %d callbacks published and %d applied, want %d", published, applied, n)
	}
	for name, want := range map[string]uint64{streams.StreamCallbacks: 0, streams.StreamDLQ: 0, streams.StreamHigh: 0, streams.StreamMed: 0} {
		s, err := e.adminJS.Stream(ctx, name)
		if err != nil {
			return err
		}
		// A token's ack is a one-way publish sent after its callback, so the
		// last acks may still be on their way when the last callback is
		// applied: give the counts a few seconds to settle.
		var got uint64
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if got, err = streamMsgs(ctx, s); err != nil {
				return err
			}
			if got == want || time.Now().After(deadline) {
				break
			}
		}
		if got != want {
			return fmt.Errorf("after the burn-down %s holds %d messages, want %d", name, got, want)
		}
	}
	return nil
}

// streamMsgs counts the messages of s; of a queue's stream, its tokens
// only (authz's keeper stays).
func streamMsgs(ctx context.Context, s jetstream.Stream) (uint64, error) {
	for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		if s.CachedInfo().Config.Name == streams.QueueStream(p) {
			return streams.QueueTokens(ctx, s, p)
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// latencyResult holds one open-loop run's latencies.
type latencyResult struct {
	rate          float64 // offered batches/s
	sent          int
	e2e           []time.Duration // scheduled submit → terminal callback published
	reply         []time.Duration // scheduled submit → authz reply
	maxInflight   int64
	senderBlocked bool
	// cpu is the process's CPU a batch, in µs: everything in it (servers,
	// authz, processors, workers, ticker, and the bench's sender and
	// observer) from the first send until the last callback was seen.
	cpu float64
}

// runLatency offers atomic no-op batches at a fixed rate for d (open loop:
// each send is scheduled in advance and its latency is measured from its
// scheduled time, so a slow system cannot slow the offered load down), with
// the processors ticking as fast as ticks allow, and observes each batch's
// terminal callback on a core subscription to callbacks.> as admin.
// The first run (first) writes the execution trace and the per-batch log
// the flags ask for.
func runLatency(cfg *config, rate float64, d time.Duration, first bool) (*latencyResult, error) {
	if cfg.latencyShipped {
		return runLatencyOf(cfg, cfg.shippedSpec(cfg.processors), rate, d, first, true)
	}
	return runLatencyOf(cfg, cfg.spec(), rate, d, first, false)
}

// runLatencyOf is runLatency with the replicas of sp, the processors driven
// back to back, or, when shipped, as `tickflow run` drives them: each
// serving ticks with Run in its pace (sp.pace), and the run's ticker.
func runLatencyOf(cfg *config, sp envSpec, rate float64, d time.Duration, first, shipped bool) (*latencyResult, error) {
	e, alice, err := tickflowEnvOf(cfg, sp)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var mu sync.Mutex
	cbAt := map[uint64]time.Time{}
	sub, err := e.admin.Subscribe("callbacks.>", func(m *nats.Msg) {
		t := time.Now()
		ids := callbackIDs(m)
		mu.Lock()
		for _, id := range ids {
			if _, ok := cbAt[id]; !ok {
				cbAt[id] = t
			}
		}
		mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return nil, err
	}
	if err := e.admin.Flush(); err != nil {
		return nil, err
	}
	if first && cfg.latencyMessages {
		// Deferred after e.close, so it runs first: it stops the ticking
		// and prints what the run sent.
		report, err := countMessages(e)
		if err != nil {
			return nil, err
		}
		defer report(rate * d.Seconds())
	}
	if shipped {
		if err := e.startTicker(tfconfig.DefaultRun().TickEvery, runTickerSteps); err != nil {
			return nil, err
		}
	} else {
		e.startTicking(cfg.maxStepsOf(sp), cfg.idle)
	}
	if first && cfg.tracefile != "" {
		stop, err := startTrace(cfg.tracefile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	if first && cfg.cpuprofile != "" && cfg.profilePhase == "latency" {
		stop, err := startCPUProfile(cfg.cpuprofile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	if first && cfg.memprofile != "" && cfg.profilePhase == "latency" {
		// The allocs profile is cumulative: this snapshot is the base to
		// subtract (go tool pprof -base FILE.base FILE).
		if err := writeHeapProfile(cfg.memprofile + ".base"); err != nil {
			return nil, err
		}
		defer func() {
			if err := writeHeapProfile(cfg.memprofile); err != nil {
				logf("latency heap profile: %v", err)
			}
		}()
	}

	count := int(rate * d.Seconds())
	res := &latencyResult{rate: rate, sent: count}
	period := time.Duration(float64(time.Second) / rate)
	sched := make([]time.Time, count)
	replied := make([]time.Time, count)
	ids := make([]uint64, count)
	errs := make([]error, count)
	c, err := aliceClient(alice, 30*time.Second)
	if err != nil {
		return nil, err
	}
	req := sendRequest(labelAtomic, 1)
	const maxInflight = 8192
	sem := make(chan struct{}, maxInflight)
	var inflight atomic.Int64
	var wg sync.WaitGroup
	start := time.Now().Add(20 * time.Millisecond)
	// Marks the trace (-trace) 20 ms before the first scheduled submission,
	// so a trace's events line up with the latency log's scheduled times.
	trace.Log(context.Background(), "bench", "latency schedule starts in 20ms")
	t0, cpu0 := time.Now(), selfBusy()
	for i := range count {
		at := start.Add(time.Duration(i) * period)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		sched[i] = at
		select {
		case sem <- struct{}{}:
		default:
			res.senderBlocked = true
			sem <- struct{}{}
		}
		if k := inflight.Add(1); k > res.maxInflight {
			res.maxInflight = k
		}
		wg.Go(func() {
			defer func() { inflight.Add(-1); <-sem }()
			ids[i], errs[i] = send(e.ctx, c, req)
			replied[i] = time.Now()
		})
	}
	wg.Wait()
	if cfg.verbose {
		ts := &e.tickStats
		ts.mu.Lock()
		busyTicks := ts.ticks - ts.idle
		logf("  ticks %d (idle %d), %.1f steps per busy tick, %.2f ms per busy tick; process CPU %.2f cores",
			ts.ticks, ts.idle, float64(ts.steps)/float64(max(busyTicks, 1)), float64(ts.busy.Microseconds())/1000/float64(max(busyTicks, 1)),
			(selfBusy()-cpu0)/time.Since(t0).Seconds())
		ts.mu.Unlock()
	}
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("latency: submit %d: %w", i, err)
		}
	}
	// Wait for every callback.
	deadline := time.Now().Add(cfg.stall)
	for {
		mu.Lock()
		missing := 0
		for _, id := range ids {
			if _, ok := cbAt[id]; !ok {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("latency: %d of %d callbacks missing after %s", missing, count, cfg.stall)
		}
		time.Sleep(10 * time.Millisecond)
	}
	res.cpu = (selfBusy() - cpu0) / float64(count) * 1e6
	mu.Lock()
	for i, id := range ids {
		res.e2e = append(res.e2e, cbAt[id].Sub(sched[i]))
		res.reply = append(res.reply, replied[i].Sub(sched[i]))
	}
	mu.Unlock()
	if first && cfg.latencyLog != "" {
		if err := writeLatencyLog(cfg.latencyLog, start, sched, res); err != nil {
			return nil, err
		}
	}
	slices.Sort(res.e2e)
	slices.Sort(res.reply)
	return res, nil
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p/100+0.5) - 1
	i = min(max(i, 0), len(sorted)-1)
	return sorted[i]
}

// startTrace starts a runtime execution trace into path and returns what
// stops it.
func startTrace(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { trace.Stop(); f.Close() }, nil
}

// writeLatencyLog writes one line per batch of a latency run, in the order
// they were scheduled: the scheduled time from the run's start, submit →
// authz reply and submit → callback, all in µs.
func writeLatencyLog(path string, start time.Time, sched []time.Time, res *latencyResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for i := range sched {
		fmt.Fprintf(w, "%d %d %d\n", sched[i].Sub(start).Microseconds(), res.reply[i].Microseconds(), res.e2e[i].Microseconds())
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// countMessages counts every message of the account by class and role (as
// the rtt phase does) from now on, and returns what stops the ticking,
// waits for the counts to settle and logs them per batch of n.
func countMessages(e *env) (func(n float64), error) {
	obs, err := e.connect("admin")
	if err != nil {
		return nil, err
	}
	c, _, err := countAll(obs) // closed with the connection
	if err != nil {
		return nil, err
	}
	return func(n float64) {
		e.stopTicking()
		if err := settle(obs, c); err != nil {
			logf("  message counts: %v", err)
			return
		}
		for _, m := range diff(nil, c.snapshot()) {
			logf("  %-45s %-10s %-8s %6.2f per batch", m.class, m.role, m.kind, float64(m.n)/n)
		}
	}, nil
}
