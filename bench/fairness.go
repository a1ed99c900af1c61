package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
)

// fairnessTable lets alice and bob send to the bench domain with every
// caller bound at authz's defaults (no callers: section): the fairness
// phase measures what one caller costs another as shipped.
const fairnessTable = `
labels:
  fair:
    domain: ` + benchDomain + `
    users: [alice, bob]
    mode: atomic
    priority: high
    functions:
      noop: {}
`

// runFairnessPhase measures what one caller's history and requests cost
// another's: alice records -fairness-n batches, each with its own key and
// idempotency key (each its own index window before the submitter index
// was a log); then 64 listings of 10, 16 at a time, while bob sends one
// batch every 200ms; then authz's memory (the whole bench process) before
// and after 2,000 listings of 500, 8 at a time. No processor runs: the
// batches wait in their queue, as a paused domain's would.
func runFairnessPhase(cfg *config, res *results) error {
	n := cfg.fairnessN
	logf("fairness: %d keyed idempotent batches of alice's, then 64 × list {limit 10} 16 at a time while bob sends every 200ms", n)
	quiet(cfg)
	m := startMeter()
	e, err := startEnv(cfg, false)
	if err != nil {
		return err
	}
	defer e.close()
	e.table = fairnessTable
	if err := e.startAuthz(1); err != nil {
		return err
	}
	alice, err := clientAs(e, "alice")
	if err != nil {
		return err
	}
	bob, err := clientAs(e, "bob")
	if err != nil {
		return err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	start := time.Now()
	for range 8 { // below alice's share of requests in flight
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				s := strconv.FormatInt(i, 10)
				if _, err := alice.Send(e.ctx, authz.SendRequest{Label: "fair", Functions: authz.Calls{{Type: "noop"}}, Key: "k" + s, IdempotencyKey: "i" + s}); err != nil {
					errs <- fmt.Errorf("fairness: alice's send %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	logf("fairness: %d batches recorded in %s", n, time.Since(start).Round(time.Millisecond))

	// 64 listings of 10, 16 at a time, while bob sends every 200ms.
	ctx, stop := context.WithCancel(e.ctx)
	var bobLat []time.Duration
	var bobErrs int
	bobDone := make(chan struct{})
	go func() {
		defer close(bobDone)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t0 := time.Now()
			_, err := bob.Send(e.ctx, authz.SendRequest{Label: "fair", Functions: authz.Calls{{Type: "noop"}}})
			if err != nil {
				bobErrs++
				logf("fairness: bob's send: %v", err)
				continue
			}
			bobLat = append(bobLat, time.Since(t0))
		}
	}()
	lists := make(chan struct{}, 64)
	for range 64 {
		lists <- struct{}{}
	}
	close(lists)
	var mu sync.Mutex
	var listLat []time.Duration
	refused, failed := 0, 0
	for range 16 {
		wg.Go(func() {
			for range lists {
				t0 := time.Now()
				_, err := alice.List(e.ctx, authz.ListRequest{Limit: 10})
				d := time.Since(t0)
				mu.Lock()
				switch {
				case errors.Is(err, client.ErrTooManyRequests):
					refused++
				case err != nil:
					failed++
					logf("fairness: alice's list: %v", err)
				default:
					listLat = append(listLat, d)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	// Bob goes on a second past the listings, so that his sends cover them.
	time.Sleep(time.Second)
	stop()
	<-bobDone
	if failed > 0 || bobErrs > 0 || len(bobLat) == 0 {
		return fmt.Errorf("fairness: %d of alice's listings failed, %d of bob's %d sends failed", failed, bobErrs, len(bobLat)+bobErrs)
	}
	slices.Sort(listLat)
	slices.Sort(bobLat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	logf("fairness: lists answered %d (max %s), refused 429 %d; bob's sends %d (max %s)", len(listLat), listLat[len(listLat)-1], refused, len(bobLat), bobLat[len(bobLat)-1])
	res.add("fair.list.max", fmt.Sprintf("**slowest of 64 × list {limit 10}, 16 at a time**, with %d keyed idempotent batches recorded (goal ≤ 2,000 ms)", n), "ms", ms(listLat[len(listLat)-1]), m)
	res.add("fair.list.p50", "median of those listings", "ms", ms(listLat[len(listLat)/2]), m)
	res.add("fair.list.429", "of those listings refused 429 (over alice's share of requests in flight)", "listings", float64(refused), m)
	res.add("fair.bob.max", "**slowest of bob's sends meanwhile**, one every 200ms (goal ≤ 1,000 ms)", "ms", ms(bobLat[len(bobLat)-1]), m)
	res.add("fair.bob.n", "bob's sends meanwhile, all answered", "sends", float64(len(bobLat)), m)

	// Memory: before and after 2,000 listings of 500, 8 at a time.
	before := rssMiB()
	big := make(chan struct{}, 2000)
	for range 2000 {
		big <- struct{}{}
	}
	close(big)
	peak := before
	for range 8 {
		wg.Go(func() {
			for range big {
				if _, err := alice.List(e.ctx, authz.ListRequest{Limit: 500}); err != nil && !errors.Is(err, client.ErrTooManyRequests) {
					logf("fairness: a listing of 500: %v", err)
				}
				if r := rssNow(); r > 0 {
					mu.Lock()
					peak = max(peak, r)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	after := rssMiB()
	logf("fairness: RSS %.1f MiB before 2,000 listings of 500, %.1f MiB at most during, %.1f MiB after", before, peak, after)
	res.add("fair.rss.before", "RSS of the bench process (server, authz) before 2,000 × list {limit 500}, after a GC", "MiB", before, m)
	res.add("fair.rss.peak", "RSS during them", "MiB", peak, m)
	res.add("fair.rss.after", "**RSS after them, after a GC** (goal within 20% of before)", "MiB", after, m)
	res.note("Fairness: one server and one authz replica with the callers' default bounds (16 requests in flight each); alice records %d atomic one-function batches, each with its own key and idempotency key, 8 at a time, with no processor (they wait in their queue); then 64 listings of 10, 16 at a time, while bob sends one batch every 200ms; then 2,000 listings of 500, 8 at a time. RSS is the whole bench process (the server and authz run in it), read after a GC and returning freed memory to the system.", n)
	return e.err()
}

// clientAs connects user and returns its client of the authz API.
func clientAs(e *env, user string) (*client.Client, error) {
	nc, err := e.connect(user)
	if err != nil {
		return nil, err
	}
	return client.New(nc, user, client.Config{Timeout: 10 * time.Second})
}

// rssMiB is this process's resident set after a collection that returns
// freed memory to the system.
func rssMiB() float64 {
	runtime.GC()
	debug.FreeOSMemory()
	return rssNow()
}

// rssNow reads VmRSS from /proc/self/status, in MiB (0 where unreadable).
func rssNow() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				return 0
			}
			return kb / 1024
		}
	}
	return 0
}
