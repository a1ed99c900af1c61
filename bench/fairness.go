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

	"github.com/tickflow/tickflow/api"
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

// The fairness phase's listings: fairLists of 10, fairListsAtOnce at a time.
const (
	fairLists       = 64
	fairListsAtOnce = 16
)

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
				if _, err := alice.Send(e.ctx, api.SendRequest{Label: "fair", Functions: api.Calls{{Type: "noop"}}, Key: "k" + s, IdempotencyKey: "i" + s}); err != nil {
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

	// 64 listings of 10, 16 at a time, while bob sends every 200ms. An
	// answer is a listing or a refusal (429): both are timed; an error
	// (a timeout) is counted as failed, and misses the goal.
	stopBob := sendEvery(e.ctx, bob, 200*time.Millisecond)
	lists := make(chan struct{}, fairLists)
	for range fairLists {
		lists <- struct{}{}
	}
	close(lists)
	var mu sync.Mutex
	var listLat []time.Duration
	refused, failed := 0, 0
	for range fairListsAtOnce {
		wg.Go(func() {
			for range lists {
				t0 := time.Now()
				_, err := alice.List(e.ctx, api.ListRequest{Limit: 10})
				d := time.Since(t0)
				mu.Lock()
				switch {
				case errors.Is(err, client.ErrTooManyRequests):
					refused++
					listLat = append(listLat, d)
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
	bobLat, bobErrs := stopBob()
	slices.Sort(listLat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	listMax, listP99 := ms(percentile(listLat, 100)), ms(percentile(listLat, 99))
	bobMax := ms(percentile(bobLat, 100))
	logf("fairness: %d lists answered (max %.2f ms, p99 %.2f ms), %d of them refused 429, %d failed; bob's sends %d answered (max %.2f ms), %d failed",
		len(listLat), listMax, listP99, refused, failed, len(bobLat), bobMax, bobErrs)
	if len(listLat) > 0 {
		res.add("fair.list.max", fmt.Sprintf("**slowest answer of %d × list {limit 10}, %d at a time**, with %d keyed idempotent batches recorded (goal ≤ 2,000 ms)", fairLists, fairListsAtOnce, n), "ms", listMax, m)
		res.add("fair.list.p99", "p99 of those answers", "ms", listP99, m)
	}
	res.add("fair.list.429", "of those listings refused 429 (over alice's share of requests in flight; answered, and timed above)", "listings", float64(refused), m)
	res.add("fair.list.failed", "of those listings not answered (an error or a timeout after 10 s)", "listings", float64(failed), m)
	if len(bobLat) > 0 {
		res.add("fair.bob.max", "**slowest of bob's sends meanwhile**, one every 200ms (goal ≤ 1,000 ms)", "ms", bobMax, m)
	}
	res.add("fair.bob.n", "bob's sends meanwhile answered", "sends", float64(len(bobLat)), m)
	res.add("fair.bob.failed", "bob's sends meanwhile not answered (an error or a timeout after 10 s)", "sends", float64(bobErrs), m)

	// Memory: before and after 2,000 listings of 500, 8 at a time.
	before := rssMiB()
	stopBob = sendEvery(e.ctx, bob, 200*time.Millisecond)
	big := make(chan struct{}, 2000)
	for range 2000 {
		big <- struct{}{}
	}
	close(big)
	peak, bigErrs := before, 0
	for range 8 {
		wg.Go(func() {
			for range big {
				if _, err := alice.List(e.ctx, api.ListRequest{Limit: 500}); err != nil && !errors.Is(err, client.ErrTooManyRequests) {
					logf("fairness: a listing of 500: %v", err)
					mu.Lock()
					bigErrs++
					mu.Unlock()
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
	bigBobLat, bigBobErrs := stopBob()
	after := rssMiB()
	logf("fairness: bob's sends during the listings of 500: %d answered (max %.2f ms), %d failed", len(bigBobLat), ms(percentile(bigBobLat, 100)), bigBobErrs)
	if len(bigBobLat) > 0 {
		res.add("fair.bob.bigmax", "**slowest of bob's sends during the 2,000 listings of 500**, one every 200ms (goal ≤ 1,000 ms)", "ms", ms(percentile(bigBobLat, 100)), m)
	}
	res.add("fair.bob.bign", "bob's sends during them answered", "sends", float64(len(bigBobLat)), m)
	res.add("fair.bob.bigfailed", "bob's sends during them not answered", "sends", float64(bigBobErrs), m)
	logf("fairness: RSS %.1f MiB before 2,000 listings of 500, %.1f MiB at most during, %.1f MiB after", before, peak, after)
	res.add("fair.rss.before", "RSS of the bench process (server, authz) before 2,000 × list {limit 500}, after a GC", "MiB", before, m)
	res.add("fair.rss.peak", "RSS during them", "MiB", peak, m)
	res.add("fair.rss.after", "**RSS after them, after a GC** (goal within 20% of before)", "MiB", after, m)
	if bigErrs > 0 {
		res.note("Fairness: %d of the 2,000 listings of 500 failed (not refused: an error or a timeout).", bigErrs)
	}
	res.note("Fairness: one server and one authz replica with the callers' default bounds (16 requests in flight each); alice records %d atomic one-function batches, each with its own key and idempotency key, 8 at a time, with no processor (they wait in their queue); then 64 listings of 10, 16 at a time, while bob sends one batch every 200ms; then 2,000 listings of 500, 8 at a time. RSS is the whole bench process (the server and authz run in it), read after a GC and returning freed memory to the system.", n)
	return e.err()
}

// sendEvery has c send a one-function batch of the fairness label every
// period until the returned function is called; that returns the latency
// of each answered send, sorted, and how many failed (an error or a
// timeout). Bob goes on a second past his stop being asked for, so that
// his sends cover what he meant to measure.
func sendEvery(ctx context.Context, c *client.Client, period time.Duration) func() ([]time.Duration, int) {
	ctx, stop := context.WithCancel(ctx)
	var lat []time.Duration
	var errs int
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t0 := time.Now()
			if _, err := c.Send(context.WithoutCancel(ctx), api.SendRequest{Label: "fair", Functions: api.Calls{{Type: "noop"}}}); err != nil {
				errs++
				logf("fairness: bob's send: %v", err)
				continue
			}
			lat = append(lat, time.Since(t0))
		}
	}()
	return func() ([]time.Duration, int) {
		time.Sleep(time.Second)
		stop()
		<-done
		slices.Sort(lat)
		return lat, errs
	}
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
