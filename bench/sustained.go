package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	tfconfig "github.com/tickflow/tickflow/config"
)

// sustainedWindow is the bound on batches submitted but not yet called
// back in the sustained run: every submitter busy plus a full tick of every
// processor queued, so the processors never wait for work and the queue
// cannot grow without bound.
func (c *config) sustainedWindow() int {
	return c.sustainedWindowOf(c.spec())
}

// sustainedWindowOf is sustainedWindow for the replicas of sp.
func (c *config) sustainedWindowOf(sp envSpec) int {
	return c.inflight + sp.processors*c.maxStepsOf(sp)
}

// runSustained measures the rate the system sustains with submit and drain
// running together: n atomic no-op batches submitted through authz by
// cfg.inflight goroutines while the processors tick back to back, closed
// loop with at most sustainedWindow batches submitted whose terminal
// callback has not been published yet, timed until authz has applied the
// last callback. Submit and drain then go at the same pace and share the
// machine, which is what an offered load meets in the latency run.
func runSustained(cfg *config, n int) (float64, error) {
	return runSustainedOf(cfg, cfg.spec(), n, false)
}

// runSustainedOf is runSustained with the replicas of sp, the processors
// ticked back to back or, when shipped, driven as `tickflow run` drives
// them (Run in their pace beside the run's ticker).
func runSustainedOf(cfg *config, sp envSpec, n int, shipped bool) (float64, error) {
	e, alice, err := tickflowEnvOf(cfg, sp)
	if err != nil {
		return 0, err
	}
	defer e.close()
	window := make(chan struct{}, cfg.sustainedWindowOf(sp))
	sub, err := e.admin.Subscribe("callbacks.>", func(m *nats.Msg) {
		for range callbacksIn(m) {
			select {
			case <-window:
			default: // a redelivered callback: its slot is already free
			}
		}
	})
	if err != nil {
		return 0, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return 0, err
	}
	if err := e.admin.Flush(); err != nil {
		return 0, err
	}
	sctx, scancel := context.WithCancel(e.ctx)
	defer scancel()
	done := make(chan struct{})
	start := time.Now()
	if shipped {
		if err := e.startTicker(tfconfig.DefaultRun().TickEvery, runTickerSteps); err != nil {
			return 0, err
		}
	} else {
		e.startTicking(cfg.maxStepsOf(sp), cfg.idle)
	}
	withRole("alice", func() {
		go func() {
			defer close(done)
			if _, err := submitAll(sctx, alice, labelAtomic, 1, n, cfg.inflight, window); err != nil && sctx.Err() == nil {
				e.fail(err)
			}
		}()
	})
	_, tapp, err := e.waitCallbacks(start, uint64(n), cfg.stall)
	scancel()
	<-done
	e.stopTicking()
	if err != nil {
		return 0, err
	}
	if err := checkClean(e, n); err != nil {
		return 0, err
	}
	return float64(n) / tapp.Seconds(), nil
}

// latencyRate is the offered rate of the latency run: -latency-rate when
// given, otherwise half of the rate sustained with submit and drain running
// together, measured here first (cfg.reps closed-loop runs, the median).
func latencyRate(cfg *config, res *results) (float64, error) {
	if cfg.latencyRate > 0 {
		res.note("The latency run offered %.0f batches/s, as -latency-rate asked.", cfg.latencyRate)
		return cfg.latencyRate, nil
	}
	for i := range cfg.reps {
		quiet(cfg)
		m := startMeter()
		r, err := runSustained(cfg, cfg.n)
		if err != nil {
			return 0, fmt.Errorf("sustained: %w", err)
		}
		logf("submit and drain together %d/%d: %.0f batches/s", i+1, cfg.reps, r)
		res.add("tf.both", "tickflow submit and drain together (closed loop, to callback applied)", "batches/s", r, m)
	}
	f, _ := res.get("tf.both")
	rate := f.median() / 2
	msg := fmt.Sprintf("The latency run offered %.0f batches/s: half of the %.0f batches/s the system sustained with submit and drain running together (the median of the closed-loop run above: %d batches submitted through authz by %d goroutines while the processors tick back to back, at most %d submitted whose callback was not yet published, timed until authz applied the last callback).",
		rate, f.median(), cfg.n, cfg.inflight, cfg.sustainedWindow())
	if fs, ok := res.get("tf.submit"); ok {
		if fd, ok := res.get("tf.drain"); ok {
			est := 1 / (1/fs.median() + 1/fd.median())
			msg += fmt.Sprintf(" The estimate from the separate burn-down rates, 1/(1/submit + 1/drain) = %.0f batches/s, assumes both halves are CPU-bound on the same cores; the measured rate is %.0f%% of it.", est, 100*f.median()/est)
		}
	}
	res.note("%s", msg)
	return rate, nil
}
