package main

import (
	"fmt"
	"time"

	tfconfig "github.com/tickflow/tickflow/config"
)

// shippedIdle is how long the shipped phase measures the CPU of a drained
// domain whose replicas and ticker keep running.
const shippedIdle = 5 * time.Second

// shippedRate is the offered rate of the shipped phase's latency run.
const shippedRate = 50

// runShippedPhase measures what a deployment runs: the processors with
// their defaults (the ready pace) serving ticks with Run beside the ticker
// `tickflow run` starts, for 1, 2 and 4 replicas (-scale-processors). Each
// count drains the same burn-down twice in a row, once driven back to back
// by the bench (the engine's own speed) and once as shipped, so their ratio
// holds on a busy machine; then the shipped replicas' CPU once idle, and
// the latency of the shipped wiring at 50 batches/s.
func runShippedPhase(cfg *config, res *results) error {
	every := tfconfig.DefaultRun().TickEvery
	for _, p := range cfg.scaleProcessors {
		sp := envSpec{processors: p, authz: cfg.authzReplicas, workers: cfg.workerCount(p)}
		quiet(cfg)
		m := startMeter()
		b2b, err := runBurnDown(cfg, burnOptions{spec: sp, label: labelAtomic, functions: 1, n: cfg.scaleN, units: 1})
		if err != nil {
			return fmt.Errorf("shipped (%d processors), back to back: %w", p, err)
		}
		res.add(fmt.Sprintf("sh.b2b.%d", p), fmt.Sprintf("drain, back-to-back ticks, %d processor(s) (N = %d)", p, cfg.scaleN), "batches/s", b2b.drainRate, m)
		quiet(cfg)
		m = startMeter()
		sh, err := runBurnDown(cfg, burnOptions{spec: sp, label: labelAtomic, functions: 1, n: cfg.scaleN, units: 1,
			tickEvery: every, tickerSteps: runTickerSteps, idleFor: shippedIdle})
		if err != nil {
			return fmt.Errorf("shipped (%d processors): %w", p, err)
		}
		logf("shipped %d processor(s): drain %.0f batches/s, back to back %.0f (%.0f%%); idle %.3f cores",
			p, sh.drainRate, b2b.drainRate, 100*sh.drainRate/b2b.drainRate, sh.idleCores)
		res.add(fmt.Sprintf("sh.drain.%d", p), fmt.Sprintf("drain as shipped (ready pace + ticker), %d processor(s) (N = %d)", p, cfg.scaleN), "batches/s", sh.drainRate, m)
		res.add(fmt.Sprintf("sh.ratio.%d", p), fmt.Sprintf("drain as shipped ÷ back-to-back, %d processor(s)", p), "%", 100*sh.drainRate/b2b.drainRate, m)
		res.add(fmt.Sprintf("sh.idle.%d", p), fmt.Sprintf("CPU of the whole process once drained, %d idle processor(s) + ticker + server", p), "% of a core", 100*sh.idleCores, m)
	}
	quiet(cfg)
	m := startMeter()
	l, err := runLatencyOf(cfg, cfg.spec(), shippedRate, cfg.latencyDur, false, true)
	if err != nil {
		return fmt.Errorf("shipped latency: %w", err)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	logf("shipped latency at %d batches/s (%d sent): p50 %.2f ms, p99 %.2f ms", shippedRate, l.sent, ms(percentile(l.e2e, 50)), ms(percentile(l.e2e, 99)))
	res.add("sh.lat.p50", fmt.Sprintf("latency submit → callback as shipped at %d batches/s, p50", shippedRate), "ms", ms(percentile(l.e2e, 50)), m)
	res.add("sh.lat.p99", fmt.Sprintf("latency submit → callback as shipped at %d batches/s, p99", shippedRate), "ms", ms(percentile(l.e2e, 99)), m)
	res.note("Shipped: the processors run (processor Run) with their defaults, the ready pace, beside the ticker `tickflow run` starts (every %s asking %d steps), each on its own connection as in the other phases; each replica count drains the same burn-down first driven back to back by the bench, then as shipped. The idle CPU is the whole bench process (server, authz, workers, idle processors, ticker) over %s once drained.",
		every, runTickerSteps, shippedIdle)
	return nil
}
