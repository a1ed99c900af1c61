package main

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tfconfig "github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/streams"
)

// runSoakPhase runs the shipped wiring (two processors in the ready pace
// beside the run's ticker) at full speed, submit and drain together in a
// closed loop, for -soak-duration with finished batches kept only
// -soak-retention, and reports per tenth of the run the batches finished,
// the store's bytes on disk, the messages in the batches and progress
// buckets and the process's RSS: with retention they level off after the
// first windows instead of growing with the batches done.
func runSoakPhase(cfg *config, res *results) error {
	keep := cfg.finishedAge
	cfg.finishedAge = cfg.soakRetention
	defer func() { cfg.finishedAge = keep }()
	d, windows := cfg.soakDuration, 10
	logf("soak: %s at full speed, finished batches kept %s, sampled every %s", d, cfg.soakRetention, d/time.Duration(windows))
	quiet(cfg)
	m := startMeter()
	e, alice, err := tickflowEnvOf(cfg, cfg.shippedSpec(2))
	if err != nil {
		return err
	}
	defer e.close()
	window := make(chan struct{}, cfg.sustainedWindowOf(cfg.shippedSpec(2)))
	var done atomic.Uint64
	sub, err := e.admin.Subscribe("callbacks.>", func(*nats.Msg) {
		done.Add(1)
		select {
		case <-window:
		default:
		}
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return err
	}
	if err := e.startTicker(tfconfig.DefaultRun().TickEvery, runTickerSteps); err != nil {
		return err
	}
	sctx, scancel := context.WithCancel(e.ctx)
	defer scancel()
	submitted := make(chan struct{})
	withRole("alice", func() {
		go func() {
			defer close(submitted)
			if _, err := submitAll(sctx, alice, labelAtomic, 1, math.MaxInt32, cfg.inflight, window); err != nil && sctx.Err() == nil {
				e.fail(err)
			}
		}()
	})
	type sample struct {
		at                time.Duration
		done              uint64
		disk              int64
		batches, progress uint64
		rss               float64
	}
	var samples []sample
	start := time.Now()
	for i := 1; i <= windows; i++ {
		time.Sleep(time.Until(start.Add(d * time.Duration(i) / time.Duration(windows))))
		s := sample{at: time.Since(start).Round(time.Second), done: done.Load(), disk: dirBytes(e.dir), rss: rssMiB()}
		s.batches, _ = bucketMsgs(e.ctx, e.adminJS, streams.BucketBatches)
		s.progress, _ = bucketMsgs(e.ctx, e.adminJS, streams.BucketProgress)
		samples = append(samples, s)
		logf("soak: %s: %d batches finished, %.1f MiB on disk, batches %d / progress %d messages, RSS %.1f MiB",
			s.at, s.done, float64(s.disk)/(1<<20), s.batches, s.progress, s.rss)
		if err := e.err(); err != nil {
			return err
		}
	}
	scancel()
	<-submitted
	e.stopTicking()
	for i, s := range samples {
		w := fmt.Sprintf("at %s (%d of %d)", s.at, i+1, windows)
		res.add(fmt.Sprintf("soak.done.%02d", i), "soak, batches finished "+w, "batches", float64(s.done), m)
		res.add(fmt.Sprintf("soak.disk.%02d", i), "soak, **store on disk** "+w, "MiB", float64(s.disk)/(1<<20), m)
		res.add(fmt.Sprintf("soak.kv.%02d", i), "soak, messages in the batches + progress buckets "+w, "messages", float64(s.batches+s.progress), m)
		res.add(fmt.Sprintf("soak.rss.%02d", i), "soak, **process RSS** after a GC "+w, "MiB", s.rss, m)
	}
	for name := range e.adminJS.StreamNames(e.ctx).Name() {
		if st, err := e.adminJS.Stream(e.ctx, name); err == nil {
			c := st.CachedInfo()
			logf("soak: stream %s: %d messages, %.1f MiB, max age %s", name, c.State.Msgs, float64(c.State.Bytes)/(1<<20), c.Config.MaxAge)
		}
	}
	third, last := samples[windows/3], samples[windows-1]
	logf("soak: disk %.1f → %.1f MiB, RSS %.1f → %.1f MiB from a third of the run to its end, while the batches finished went %d → %d",
		float64(third.disk)/(1<<20), float64(last.disk)/(1<<20), third.rss, last.rss, third.done, last.done)
	res.note("Soak: the shipped wiring (2 processors in the ready pace beside the run's ticker, one authz) with `streams.finished_max_age` %s, submit and drain together in a closed loop at full speed for %s; every tenth of the run: batches finished (terminal callbacks), the store's bytes on disk (the JetStream directory), the messages in the `batches` and `progress` buckets, the whole process's RSS after a GC. Retention holds when the last window's disk and RSS stay within 1.2× of those a third of the way in.", cfg.soakRetention, d)
	return e.err()
}

// dirBytes sums the sizes of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// bucketMsgs is the number of messages the bucket's stream holds.
func bucketMsgs(ctx context.Context, js jetstream.JetStream, bucket string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		return 0, err
	}
	return st.CachedInfo().State.Msgs, nil
}
