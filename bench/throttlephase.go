package main

import (
	"context"
	"fmt"
	"time"

	tfconfig "github.com/tickflow/tickflow/config"
)

// runThrottlePhase measures the throttle shared by replicas: a domain
// throttled to -throttle-rate steps per second, served by
// -throttle-replicas processors wired as shipped (the ready pace beside the
// run's ticker), with a backlog larger than the window can drain. The
// steps it ran are counted as terminal callbacks published (a one-function
// atomic batch takes one step), read half a second into each second of the
// clock, so each count holds the steps of whole budget windows (the budget
// is per second of the clock; a noop step ends within milliseconds of its
// grant, and on a backlog a window's budget is spent at its start).
func runThrottlePhase(cfg *config, res *results) error {
	limit, window := cfg.throttleRate, int(cfg.throttleWindow/time.Second)
	sp := cfg.shippedSpec(cfg.throttleReplicas)
	sp.throttle = limit
	// Enough for a warm-up second, the window and a margin at twice the
	// limit, so the backlog lasts whatever the throttle lets through.
	n := 2 * limit * (window + 3)
	logf("throttle: %d steps/s over %d replicas, %d batches queued, counted over %d s", limit, sp.processors, n, window)
	quiet(cfg)
	m := startMeter()
	e, alice, err := tickflowEnvOf(cfg, sp)
	if err != nil {
		return err
	}
	defer e.close()
	var submitErr error
	withRole("alice", func() {
		_, submitErr = submitAll(e.ctx, alice, labelAtomic, 1, n, cfg.inflight, nil)
	})
	if submitErr != nil {
		return fmt.Errorf("throttle: submit: %w", submitErr)
	}
	if err := e.startTicker(tfconfig.DefaultRun().TickEvery, runTickerSteps); err != nil {
		return err
	}
	published := func() (uint64, error) {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		pub, _, err := e.callbackProgress(ctx)
		return pub, err
	}
	// The first count is taken half a second into the second after a whole
	// second of warm-up, then one each second.
	at := time.Now().Truncate(time.Second).Add(2*time.Second + 500*time.Millisecond)
	var counts []uint64
	for i := 0; i <= window; i++ {
		time.Sleep(time.Until(at))
		c, err := published()
		if err != nil {
			return fmt.Errorf("throttle: %w", err)
		}
		counts = append(counts, c)
		at = at.Add(time.Second)
	}
	e.stopTicking()
	if err := e.err(); err != nil {
		return err
	}
	last := counts[len(counts)-1]
	if last >= uint64(n) {
		return fmt.Errorf("throttle: the backlog of %d batches ran out (%d callbacks): the throttle did not hold", n, last)
	}
	for i := 1; i < len(counts); i++ {
		res.add("th.sec", fmt.Sprintf("steps in one second of the clock, throttled to %d/s over %d replicas (each of %d seconds)", limit, sp.processors, window), "steps", float64(counts[i]-counts[i-1]), m)
	}
	rate := float64(last-counts[0]) / float64(window)
	logf("throttle: %.1f steps/s over %d s (limit %d/s, %d replicas); per second %v", rate, window, limit, sp.processors, counts)
	res.add("th.rate", fmt.Sprintf("**steps/s run, throttled to %d/s over %d replicas** (backlog throughout, %d whole seconds)", limit, sp.processors, window), "steps/s", rate, m)
	res.throttleLimit = limit
	res.note("Throttle: %d processor replicas wired as shipped (ready pace, the run's ticker), every one given -throttle %d, over a backlog of %d one-function atomic batches (one step each); the steps are the terminal callbacks published, counted half a second into each second of the clock after a second of warm-up, over %d whole seconds (the budget is per second of the clock).",
		sp.processors, limit, n, window)
	return nil
}
