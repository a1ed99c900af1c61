package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
)

// asynqTunedCheck is the TaskCheckInterval of asynq's tuned latency runs:
// about how long asynq's dequeue loop, finding the queue empty, sleeps
// before it looks again (0.5 to 1.5 times the interval, at random). asynq's
// default is 1 s, so a task that arrives meanwhile waits up to 1.5 s.
const asynqTunedCheck = time.Millisecond

// asynqLatency is one open-loop run of asynq: the peer's figures under the
// latency run's definition.
type asynqLatency struct {
	rate float64         // offered tasks/s
	lat  []time.Duration // scheduled enqueue → handler done, sorted
	// cpu is the bench process's and redis-server's CPU a task, in µs,
	// from the first enqueue until the last task was handled. (Once
	// redis-server, the bench's child, has been waited for, the kernel
	// counts its CPU as the bench's own, so the meter's other processes
	// leave it out.)
	cpu float64
}

// asynqServer starts an asynq server on r with concurrency workers that
// look for new tasks every check when the queue is empty (0: asynq's
// default) and handler as every task's handler.
func asynqServer(r *redisProc, concurrency int, check time.Duration, handler func(*asynq.Task)) (*asynq.Server, error) {
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: r.addr, PoolSize: max(concurrency, 10)}, asynq.Config{
		Concurrency:       concurrency,
		Queues:            map[string]int{"default": 1},
		LogLevel:          asynq.ErrorLevel,
		TaskCheckInterval: check,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(_ context.Context, t *asynq.Task) error {
		handler(t)
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return nil, fmt.Errorf("asynq: start server: %w", err)
	}
	return srv, nil
}

// runAsynqSustained is runSustained for asynq: n no-op tasks enqueued by
// cfg.inflight goroutines while an asynq server (its workers looking again
// every asynqTunedCheck) handles them, closed loop with at most inflight +
// concurrency tasks enqueued and not yet handled, timed until the last one
// was handled.
func runAsynqSustained(cfg *config, n int) (float64, error) {
	r, err := startRedis(cfg)
	if err != nil {
		return 0, err
	}
	defer r.stop()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: r.addr, PoolSize: max(cfg.inflight, 10)})
	defer client.Close()
	window := make(chan struct{}, cfg.inflight+cfg.asynqConcurrency())
	var handled atomic.Int64
	all := make(chan struct{})
	srv, err := asynqServer(r, cfg.asynqConcurrency(), asynqTunedCheck, func(*asynq.Task) {
		<-window
		if handled.Add(1) == int64(n) {
			close(all)
		}
	})
	if err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var next atomic.Int64
	errc := make(chan error, 1)
	start := time.Now()
	for range min(cfg.inflight, n) {
		go func() {
			for next.Add(1) <= int64(n) {
				select {
				case window <- struct{}{}:
				case <-ctx.Done():
					return
				}
				if _, err := client.Enqueue(asynq.NewTask("noop", nil), asynq.MaxRetry(0)); err != nil {
					select {
					case errc <- err:
					default:
					}
					return
				}
			}
		}()
	}
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	last, deadline := int64(0), time.Now().Add(cfg.stall)
	for {
		select {
		case <-all:
			return float64(n) / time.Since(start).Seconds(), nil
		case err := <-errc:
			return 0, fmt.Errorf("asynq: enqueue: %w", err)
		case now := <-poll.C:
			if h := handled.Load(); h != last {
				last, deadline = h, now.Add(cfg.stall)
			} else if now.After(deadline) {
				return 0, fmt.Errorf("asynq: sustained run stalled at %d of %d tasks", h, n)
			}
		}
	}
}

// runAsynqLatency is runLatency for asynq: no-op tasks enqueued at rate
// for d, each scheduled in advance and timed from its schedule to the end
// of its handler (asynq marks it done after that: a bound in its favour),
// with an asynq server of cfg.asynqConcurrency() workers that look for new
// tasks every check when the queue is empty (0: asynq's default, 1 s).
func runAsynqLatency(cfg *config, rate float64, d time.Duration, check time.Duration) (*asynqLatency, error) {
	r, err := startRedis(cfg)
	if err != nil {
		return nil, err
	}
	defer r.stop()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: r.addr, PoolSize: max(cfg.inflight, 10)})
	defer client.Close()
	count := int(rate * d.Seconds())
	done := make([]time.Time, count)
	var handled atomic.Int64
	all := make(chan struct{})
	srv, err := asynqServer(r, cfg.asynqConcurrency(), check, func(t *asynq.Task) {
		i, err := strconv.Atoi(string(t.Payload()))
		if err != nil || i < 0 || i >= count {
			return
		}
		done[i] = time.Now()
		if handled.Add(1) == int64(count) {
			close(all)
		}
	})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown()
	period := time.Duration(float64(time.Second) / rate)
	sched := make([]time.Time, count)
	errs := make([]error, count)
	const maxInflight = 8192
	sem := make(chan struct{}, maxInflight)
	var wg sync.WaitGroup
	cpu := func() float64 { return selfBusy() + pidBusy(r.cmd.Process.Pid) }
	cpu0 := cpu()
	start := time.Now().Add(20 * time.Millisecond)
	for i := range count {
		at := start.Add(time.Duration(i) * period)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		sched[i] = at
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, errs[i] = client.Enqueue(asynq.NewTask("noop", []byte(strconv.Itoa(i))), asynq.MaxRetry(0))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("asynq latency: enqueue %d: %w", i, err)
		}
	}
	select {
	case <-all:
	case <-time.After(cfg.stall):
		return nil, fmt.Errorf("asynq latency: %d of %d tasks handled after %s", handled.Load(), count, cfg.stall)
	}
	res := &asynqLatency{rate: rate, cpu: (cpu() - cpu0) / float64(count) * 1e6}
	res.lat = make([]time.Duration, count)
	for i := range count {
		res.lat[i] = done[i].Sub(sched[i])
	}
	slices.Sort(res.lat)
	return res, nil
}

// asynqLatencyPhase applies the latency run's definition to asynq: its
// rate sustained with enqueue and handling together (cfg.reps closed-loop
// runs, the median; -latency-rate, when given, instead of half of it),
// then cfg.reps open-loop runs at half of it with its workers looking for
// new tasks every asynqTunedCheck, one more with asynq's default (1 s),
// and cfg.reps runs of tickflow offered the same rate, so that the two
// are compared at the same load as well as each at half its own rate.
func asynqLatencyPhase(cfg *config, res *results) error {
	if _, err := os.Stat(redisServer); err != nil {
		res.note("The latency phase's asynq runs were left out: %s is missing (`apt-get install -y redis-server`; make bench installs it).", redisServer)
		return nil
	}
	rate, how := cfg.latencyRate, "as -latency-rate asked"
	res.aqLatGiven = rate > 0
	if rate <= 0 {
		how = "half its sustained rate"
		var f figure
		for i := range cfg.reps {
			quiet(cfg)
			s, err := runAsynqSustained(cfg, cfg.n)
			if err != nil {
				return err
			}
			logf("asynq sustained %d/%d: %.0f tasks/s (enqueue and handling together, %d enqueuers, at most %d tasks not yet handled)",
				i+1, cfg.reps, s, cfg.inflight, cfg.inflight+cfg.asynqConcurrency())
			f.vals = append(f.vals, s)
		}
		rate = f.median() / 2
		res.note("asynq's latency runs offered %.0f tasks/s: half of the %.0f tasks/s asynq sustained with enqueue and handling together (the median of %d closed-loop runs: %d tasks enqueued by %d goroutines while an asynq server of concurrency %d handled them, at most %d enqueued and not yet handled).",
			rate, f.median(), cfg.reps, cfg.n, cfg.inflight, cfg.asynqConcurrency(), cfg.inflight+cfg.asynqConcurrency())
	}
	res.note("In asynq's latency runs each task is timed from its scheduled enqueue to the end of its handler (asynq marks it done after that: a bound in asynq's favour); the CPU is the bench process's and redis-server's, and the other processes' column leaves redis-server out.")
	res.aqLatRate = rate
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	at := fmt.Sprintf("at %.0f tasks/s", rate)
	run := func(i, reps int, check time.Duration, key, what string) error {
		quiet(cfg)
		m := startMeter()
		l, err := runAsynqLatency(cfg, rate, cfg.latencyDur, check)
		if err != nil {
			return err
		}
		others := m.others()
		logf("asynq latency %d/%d %s (%s): p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms; %.0f µs CPU a task",
			i+1, reps, at, what, ms(percentile(l.lat, 50)), ms(percentile(l.lat, 99)), ms(percentile(l.lat, 99.9)), l.cpu)
		name := fmt.Sprintf("asynq latency enqueue → handled (%s, %s; %s)", at, how, what)
		res.addOthers(key+".p50", name+", p50", "ms", ms(percentile(l.lat, 50)), others)
		res.addOthers(key+".p99", name+", p99", "ms", ms(percentile(l.lat, 99)), others)
		if check == asynqTunedCheck {
			res.addOthers(key+".p999", name+", p99.9", "ms", ms(percentile(l.lat, 99.9)), others)
			res.addOthers(key+".cpu", name+": CPU a task (the bench process and redis-server)", "µs/task", l.cpu, others)
		}
		return nil
	}
	tuned := fmt.Sprintf("workers look for new tasks every %s", asynqTunedCheck)
	for i := range cfg.reps {
		if err := run(i, cfg.reps, asynqTunedCheck, "aqlat", tuned); err != nil {
			return err
		}
	}
	if err := run(0, 1, 0, "aqlatdef", "asynq's default, every 1 s"); err != nil {
		return err
	}
	if rate == res.latRate {
		return nil
	}
	for i := range cfg.reps {
		quiet(cfg)
		m := startMeter()
		l, err := runLatency(cfg, rate, cfg.latencyDur, false)
		if err != nil {
			return err
		}
		logf("tickflow latency %d/%d at asynq's rate, %.0f batches/s: p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms; %.0f µs CPU a batch",
			i+1, cfg.reps, rate, ms(percentile(l.e2e, 50)), ms(percentile(l.e2e, 99)), ms(percentile(l.e2e, 99.9)), l.cpu)
		name := fmt.Sprintf("Latency submit → callback at asynq's rate (%.0f batches/s)", rate)
		res.add("tfaq.p50", name+", p50", "ms", ms(percentile(l.e2e, 50)), m)
		res.add("tfaq.p99", name+", p99", "ms", ms(percentile(l.e2e, 99)), m)
		res.add("tfaq.cpu", name+": CPU a batch (the whole process, the bench's sender and observer included)", "µs/batch", l.cpu, m)
	}
	return nil
}

// asynqLatencyTargets are the rows the targets table reports beside the
// latency goal, without judging them: asynq's p99 under the same
// definition, and both at the same offered load.
func asynqLatencyTargets(res *results) []target {
	med := res.median
	aq, ok := med("aqlat.p99")
	at, same := "at half its own sustained rate", "asynq's half rate"
	if res.aqLatGiven {
		at, same = "at the rate -latency-rate set", "-latency-rate's"
	}
	t := target{what: fmt.Sprintf("asynq: p99 enqueue → handled %s (its workers looking for new tasks every %s)", at, asynqTunedCheck), known: ok, noGoal: true}
	if ok {
		t.measured = fmt.Sprintf("%.2f ms at %.0f tasks/s", aq, res.aqLatRate)
		if def, ok := med("aqlatdef.p99"); ok {
			t.measured += fmt.Sprintf(" (asynq's default, every 1 s: %.0f ms)", def)
		}
	}
	ts := []target{t}
	tf, okTF := med("tfaq.p99")
	if !okTF && res.aqLatRate == res.latRate {
		tf, okTF = med("lat.p99")
	}
	t = target{what: fmt.Sprintf("p99 at the same offered load (%s): tickflow submit → callback ÷ asynq enqueue → handled", same), known: ok && okTF, noGoal: true}
	if t.known {
		t.measured = fmt.Sprintf("%.2f / %.2f ms = %.1f×", tf, aq, tf/aq)
	}
	return append(ts, t)
}
