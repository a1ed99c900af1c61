package main

import (
	"fmt"
	"time"

	"github.com/tickflow/tickflow/processor"
)

// tickerBound is the most batches/s the ticker lets the processors drain
// with one domain: one tick per interval (a tick reaches one replica of the
// queue group), each running at most its step count, cut to the
// processors' MaxSteps.
func (c *config) tickerBound() float64 {
	return float64(min(c.tickerSteps, c.tickSteps)) / c.tickerEvery.Seconds()
}

// runTickerPhase drains a burn-down with the processors in the tick pace
// (-pace tick) serving the real ticker's ticks, instead of the bench ticking
// them back to back, so the ticker's bound shows beside the back-to-back
// drain. It drains what the bound allows in about -ticker-duration.
func runTickerPhase(cfg *config, res *results) error {
	bound := cfg.tickerBound()
	n := min(max(int(bound*cfg.tickerDur.Seconds()), 1), cfg.n)
	logf("ticker: every %s asking %d steps (bound %.0f batches/s), %d batches", cfg.tickerEvery, cfg.tickerSteps, bound, n)
	quiet(cfg)
	m := startMeter()
	sp := cfg.spec()
	sp.pace = processor.PaceTick // the processors take steps only when ticked
	r, err := runBurnDown(cfg, burnOptions{spec: sp, label: labelAtomic, functions: 1, n: n, units: 1,
		tickEvery: cfg.tickerEvery, tickerSteps: cfg.tickerSteps})
	if err != nil {
		return fmt.Errorf("ticker-driven drain: %w", err)
	}
	logf("ticker-driven drain: %.0f batches/s (bound %.0f)", r.drainRate, bound)
	res.add("tf.ticker", fmt.Sprintf("tickflow drain driven by the ticker (every %s × %d steps, bound %.0f batches/s; N = %d, one run)",
		cfg.tickerEvery, cfg.tickerSteps, bound, n), "batches/s", r.drainRate, m)
	res.tickerBound = bound
	res.note("Ticker-driven drain: the processors, set to the tick pace (-pace tick), serve ticks on the domain's tick subject (processor Run, one queue group) and a real ticker publishes one every %s asking %d steps; the drain is then bounded by ticks/s × steps per tick = %.0f batches/s, however fast a step is. The back-to-back drain above sends each processor its next tick as soon as the last report is back. The first tick fires one interval after the start.",
		cfg.tickerEvery.Round(time.Millisecond), cfg.tickerSteps, bound)
	return nil
}
