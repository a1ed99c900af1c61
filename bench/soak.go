package main

import (
	"context"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tfconfig "github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/internal/streams"
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
	res.soakRetention = cfg.soakRetention
	cfg.finishedAge = cfg.soakRetention
	defer func() { cfg.finishedAge = keep }()
	d, windows := cfg.soakDuration, 10
	logf("soak: %s at full speed, finished batches kept %s, sampled every %s", d, cfg.soakRetention, d/time.Duration(windows))
	quiet(cfg)
	e, alice, err := tickflowEnvOf(cfg, cfg.shippedSpec(2))
	if err != nil {
		return err
	}
	defer e.close()
	window := make(chan struct{}, cfg.sustainedWindowOf(cfg.shippedSpec(2)))
	var done atomic.Uint64
	sub, err := e.admin.Subscribe("callbacks.>", func(m *nats.Msg) {
		n := callbacksIn(m)
		done.Add(n)
		for range n {
			select {
			case <-window:
			default:
			}
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
	start := time.Now()
	for i := 1; i <= windows; i++ {
		wm := startMeter()
		time.Sleep(time.Until(start.Add(d * time.Duration(i) / time.Duration(windows))))
		w := soakWindow{at: time.Since(start).Round(time.Second), done: done.Load(), disk: dirBytes(e.dir), rss: rssMiB(), heap: liveHeapMiB()}
		w.streams, _ = streamBytes(e.ctx, e.adminJS)
		w.batches, _ = bucketMsgs(e.ctx, e.adminJS, streams.BucketBatches)
		w.progress, _ = bucketMsgs(e.ctx, e.adminJS, streams.BucketProgress)
		w.others = wm.others()
		res.soak = append(res.soak, w)
		if cfg.memprofile != "" && cfg.profilePhase == "soak" && (i == soakThird(windows)+1 || i == windows) {
			// The live heap a third of the way in and at the end: what
			// grows between them is what holds the RSS.
			path := cfg.memprofile
			if i < windows {
				path += ".third"
			}
			if err := writeLiveHeap(path); err != nil {
				return err
			}
		}
		logf("soak: %s: %d batches finished, %.1f MiB on disk (streams %.1f MiB), batches %d / progress %d messages, RSS %.1f MiB (live heap %.1f MiB), other processes %.2f cores",
			w.at, w.done, mib(w.disk), mib(int64(w.streams)), w.batches, w.progress, w.rss, w.heap, w.others)
		if err := e.err(); err != nil {
			return err
		}
	}
	scancel()
	<-submitted
	e.stopTicking()
	var held []string
	for name := range e.adminJS.StreamNames(e.ctx).Name() {
		if st, err := e.adminJS.Stream(e.ctx, name); err == nil {
			c := st.CachedInfo()
			logf("soak: stream %s: %d messages, %.1f MiB, max age %s", name, c.State.Msgs, mib(int64(c.State.Bytes)), c.Config.MaxAge)
			if c.State.Bytes >= 1<<20 {
				held = append(held, fmt.Sprintf("`%s` %d messages, %.1f MiB (max age %s)", name, c.State.Msgs, mib(int64(c.State.Bytes)), c.Config.MaxAge))
			}
		}
	}
	slices.Sort(held)
	res.note("Soak: at its end the streams holding 1 MiB or more: %s.", strings.Join(held, "; "))
	samples := res.soak
	third, last := samples[soakThird(len(samples))], samples[len(samples)-1]
	logf("soak: disk %.1f → %.1f MiB, RSS %.1f → %.1f MiB from a third of the run to its end, while the batches finished went %d → %d",
		mib(third.disk), mib(last.disk), third.rss, last.rss, third.done, last.done)
	res.note("Soak: the shipped wiring (2 processors in the ready pace beside the run's ticker, one authz) with `streams.finished_max_age` %s, submit and drain together in a closed loop at full speed for %s; every tenth of the run: batches finished (terminal callbacks), the store's bytes on disk (the JetStream directory) and the bytes its streams hold (`State.Bytes` summed over every stream, the buckets' included), the messages in the `batches` and `progress` buckets, the RSS after a GC. Every component (server, authz, processors, workers, ticker) runs in the one bench process, so the RSS is theirs together, not any one process's. Retention holds when the last window's disk and RSS stay within 1.2× of the window a third of the way in.", cfg.soakRetention, d)
	return e.err()
}

// liveHeapMiB is the bytes of live heap objects, read right after the GC
// of rssMiB: with RSS it tells memory held by live objects from memory the
// runtime keeps after a peak (spans partly freed, which it cannot return).
func liveHeapMiB() float64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

// writeLiveHeap writes the profile of the live heap, after a GC, to path.
func writeLiveHeap(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

// soakWindow is what the soak phase measured at the end of one window.
type soakWindow struct {
	at                time.Duration // since the soak started
	done              uint64        // batches finished so far
	disk              int64         // bytes of the store's directory
	streams           uint64        // State.Bytes summed over every stream
	batches, progress uint64        // messages in those buckets
	rss               float64       // MiB, after a GC
	heap              float64       // MiB of live heap objects, after the same GC
	others            float64       // cores other processes used during the window
}

// soakThird is the index of the window a third of the way into a soak of n
// windows: the one the last is judged against.
func soakThird(n int) int { return n / 3 }

// mib converts bytes to MiB.
func mib(b int64) float64 { return float64(b) / (1 << 20) }

// streamBytes sums State.Bytes over every stream of the account.
func streamBytes(ctx context.Context, js jetstream.JetStream) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n uint64
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		n += info.State.Bytes
	}
	return n, l.Err()
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
