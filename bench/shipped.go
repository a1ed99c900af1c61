package main

import (
	"fmt"
	"slices"
	"time"

	tfconfig "github.com/tickflow/tickflow/config"
)

// shippedIdle is how long the shipped phase measures the CPU of a drained
// domain whose replicas and ticker keep running.
const shippedIdle = 5 * time.Second

// shippedRate is the fixed offered rate of the shipped phase's first
// latency run.
const shippedRate = 50

// shippedSpec is the wiring the shipped phase measures with p processor
// replicas: every component with its own defaults (processor concurrency
// and steps, worker concurrency), one worker per processor replica.
func (c *config) shippedSpec(p int) envSpec {
	return envSpec{processors: p, authz: c.authzReplicas, workers: c.workerCount(p), shipped: true}
}

// runShippedPhase measures what a deployment runs: the processors with
// their defaults (the ready pace) serving ticks with Run beside the ticker
// `tickflow run` starts, for each count of -shipped-processors, beside the
// same burn-down driven back to back by the bench (the engine's own speed).
//
// The ratio is meant to hold on a shared machine, so the two halves are
// measured as pairs: the same N, the same wiring and the same workers, one
// after the other, -shipped-reps pairs per count, in alternating order
// (back to back first in even repetitions, as shipped first in odd ones;
// the counts in reverse order in odd ones), so that a warm-up of the
// process or a drift of the machine's speed weighs on both halves alike.
// The ratio reported is the median of the pairs' ratios. Then the shipped
// replicas' CPU once idle, the rate sustained as shipped with submit and
// drain together, and the latency of the shipped wiring at 50 batches/s
// and at half that sustained rate.
func runShippedPhase(cfg *config, res *results) error {
	every := tfconfig.DefaultRun().TickEvery
	idleDone := map[int]bool{}
	for rep := range cfg.shippedReps {
		counts := slices.Clone(cfg.shippedProcs)
		backToBackFirst := rep%2 == 0
		if !backToBackFirst {
			slices.Reverse(counts)
		}
		for _, p := range counts {
			if err := shippedPair(cfg, res, p, rep, backToBackFirst, every, !idleDone[p]); err != nil {
				return err
			}
			idleDone[p] = true
		}
	}
	if err := shippedLatency(cfg, res); err != nil {
		return err
	}
	res.note("Shipped: the processors run (processor Run) with their own defaults (the ready pace, concurrency %d, %d steps a tick at most) beside the ticker `tickflow run` starts (every %s asking %d steps), one worker per processor replica with the worker's default concurrency, each on its own connection as in the other phases. Each replica count drains %d batches %d time(s) as shipped and as many times driven back to back by the bench over the same wiring, as pairs in alternating order (back to back first, then as shipped first, the replica counts in reverse order), so that a warm-up or a drift of the machine weighs on both halves alike; the ratio is the median of the pairs' ratios. The idle CPU is the whole bench process (server, authz, workers, idle processors, ticker) over %s once drained.",
		cfg.concurrencyOf(cfg.shippedSpec(1)), cfg.maxStepsOf(cfg.shippedSpec(1)), every, runTickerSteps, cfg.shippedN, cfg.shippedReps, shippedIdle)
	return nil
}

// shippedPair drains the same burn-down of p replicas back to back and as
// shipped, in the order given, and records both with their ratio; idle
// also measures the shipped replicas' CPU once drained.
func shippedPair(cfg *config, res *results, p, rep int, backToBackFirst bool, every time.Duration, idle bool) error {
	sp := cfg.shippedSpec(p)
	var b2b, sh burnResult
	var oB, oS float64 // other processes' CPU during each half
	runB := func() error {
		quiet(cfg)
		m := startMeter()
		var err error
		if b2b, err = runBurnDown(cfg, burnOptions{spec: sp, label: labelAtomic, functions: 1, n: cfg.shippedN, units: 1}); err != nil {
			return fmt.Errorf("shipped (%d processors), back to back: %w", p, err)
		}
		oB = m.others()
		return nil
	}
	runS := func() error {
		quiet(cfg)
		m := startMeter()
		o := burnOptions{spec: sp, label: labelAtomic, functions: 1, n: cfg.shippedN, units: 1, tickEvery: every, tickerSteps: runTickerSteps}
		if idle {
			o.idleFor = shippedIdle
		}
		var err error
		if sh, err = runBurnDown(cfg, o); err != nil {
			return fmt.Errorf("shipped (%d processors): %w", p, err)
		}
		oS = m.others()
		return nil
	}
	first, second := runB, runS
	if !backToBackFirst {
		first, second = runS, runB
	}
	if err := first(); err != nil {
		return err
	}
	if err := second(); err != nil {
		return err
	}
	order := "back to back first"
	if !backToBackFirst {
		order = "as shipped first"
	}
	// CPU per batch is a check that a shared machine disturbs less than
	// the rates: a pace that waits rather than works shows in the rates
	// and not here; one that works more for the same batches shows here.
	cpuRatio := 100 * sh.drainCPU / b2b.drainCPU
	logf("shipped %d processor(s) %d/%d (%s): as shipped %.0f batches/s, back to back %.0f (%.0f%%; CPU a batch %.0f%%); other processes %.2f / %.2f cores",
		p, rep+1, cfg.shippedReps, order, sh.drainRate, b2b.drainRate, 100*sh.drainRate/b2b.drainRate, cpuRatio, oS, oB)
	res.addOthers(fmt.Sprintf("sh.b2b.%d", p), fmt.Sprintf("drain driven back to back by the bench, same wiring, %d processor(s) (N = %d)", p, cfg.shippedN), "batches/s", b2b.drainRate, oB)
	res.addOthers(fmt.Sprintf("sh.drain.%d", p), fmt.Sprintf("**drain as shipped** (ready pace + ticker), %d processor(s) (N = %d)", p, cfg.shippedN), "batches/s", sh.drainRate, oS)
	res.addOthers(fmt.Sprintf("sh.ratio.%d", p), fmt.Sprintf("**drain as shipped ÷ back to back**, %d processor(s), each pair", p), "%", 100*sh.drainRate/b2b.drainRate, max(oS, oB))
	res.addOthers(fmt.Sprintf("sh.cpu.%d", p), fmt.Sprintf("CPU a drained batch as shipped ÷ back to back, %d processor(s), each pair", p), "%", cpuRatio, max(oS, oB))
	if idle {
		logf("shipped %d processor(s): idle %.3f cores", p, sh.idleCores)
		res.addOthers(fmt.Sprintf("sh.idle.%d", p), fmt.Sprintf("**CPU once drained**: the whole process with %d idle processor(s) + ticker + server (one run)", p), "% of a core", 100*sh.idleCores, oS)
	}
	return nil
}

// shippedLatency measures the rate the shipped wiring (cfg.processors
// replicas) sustains with submit and drain together, then its open-loop
// latency at 50 batches/s and at half that rate.
func shippedLatency(cfg *config, res *results) error {
	sp := cfg.shippedSpec(cfg.processors)
	for i := range cfg.shippedReps {
		quiet(cfg)
		m := startMeter()
		r, err := runSustainedOf(cfg, sp, cfg.shippedN, true)
		if err != nil {
			return fmt.Errorf("shipped, sustained: %w", err)
		}
		logf("shipped, submit and drain together %d/%d: %.0f batches/s", i+1, cfg.shippedReps, r)
		res.add("sh.both", fmt.Sprintf("submit and drain together as shipped, %d processor(s) (closed loop, N = %d)", sp.processors, cfg.shippedN), "batches/s", r, m)
	}
	f, _ := res.get("sh.both")
	half := f.median() / 2
	res.shippedHalf = half
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, run := range []struct {
		key  string
		rate float64
		what string
	}{
		{"sh.lat50", shippedRate, fmt.Sprintf("%d batches/s", shippedRate)},
		{"sh.lathalf", half, fmt.Sprintf("half the sustained rate, %.0f batches/s", half)},
	} {
		quiet(cfg)
		m := startMeter()
		l, err := runLatencyOf(cfg, sp, run.rate, cfg.latencyDur, false, true)
		if err != nil {
			return fmt.Errorf("shipped latency at %.0f batches/s: %w", run.rate, err)
		}
		logf("shipped latency at %.0f batches/s (%d sent, max %d in flight): p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms; %.0f µs CPU a batch",
			run.rate, l.sent, l.maxInflight, ms(percentile(l.e2e, 50)), ms(percentile(l.e2e, 99)), ms(percentile(l.e2e, 99.9)), l.cpu)
		res.add(run.key+".p50", fmt.Sprintf("**latency submit → callback as shipped at %s**, p50", run.what), "ms", ms(percentile(l.e2e, 50)), m)
		res.add(run.key+".p99", fmt.Sprintf("**latency submit → callback as shipped at %s**, p99", run.what), "ms", ms(percentile(l.e2e, 99)), m)
		res.add(run.key+".p999", fmt.Sprintf("latency submit → callback as shipped at %s, p99.9", run.what), "ms", ms(percentile(l.e2e, 99.9)), m)
		res.add(run.key+".cpu", fmt.Sprintf("CPU a batch as shipped at %s (the whole process, the bench's sender and observer included)", run.what), "µs/batch", l.cpu, m)
		if l.senderBlocked {
			res.note("Shipped latency at %.0f batches/s: the sender hit its in-flight bound (8192), so it was briefly closed-loop.", run.rate)
		}
	}
	res.note("Shipped latency: %d processor replica(s) wired as shipped; first the rate sustained with submit and drain together (closed loop, %d batches submitted by %d goroutines, at most %d submitted whose callback was not yet published; the median of %d run(s): %.0f batches/s), then an open-loop load for %s each at %d batches/s and at half that rate; the terminal callback is seen on a core subscription to `callbacks.>` as admin.",
		sp.processors, cfg.shippedN, cfg.inflight, cfg.sustainedWindowOf(sp), cfg.shippedReps, f.median(), cfg.latencyDur, shippedRate)
	return nil
}
