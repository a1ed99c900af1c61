package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// figure is one measured quantity over the repetitions.
type figure struct {
	key, name, unit string
	vals            []float64
	others          []float64 // cores other processes kept busy during each repetition
}

func (f *figure) median() float64 {
	if len(f.vals) == 0 {
		return 0
	}
	s := slices.Clone(f.vals)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (f *figure) min() float64 { return slices.Min(f.vals) }
func (f *figure) max() float64 { return slices.Max(f.vals) }

// results collects figures in the order they were first measured.
type results struct {
	order   []string
	figs    map[string]*figure
	notes   []string
	rtt     *rttResult
	cost    *costResult // the cost phase's last repetition
	depth   *depthOutcome
	latRate float64
	// aqLatRate is the offered rate of the latency phase's asynq runs
	// (half asynq's sustained rate, or -latency-rate's: aqLatGiven) and
	// of tickflow's run at it.
	aqLatRate   float64
	aqLatGiven  bool
	scaling     []scaleRow
	tickerBound float64
	// shippedHalf is the offered rate of the shipped phase's second
	// latency run: half the rate sustained as shipped.
	shippedHalf float64
	// soak is the soak phase's windows, in order; soakRetention its
	// streams.finished_max_age.
	soak          []soakWindow
	soakRetention time.Duration
	// throttleLimit is the throttle phase's steps per second.
	throttleLimit int
	started       time.Time
	elapsed       time.Duration
}

func (r *results) add(key, name, unit string, v float64, m cpuMeter) {
	r.addOthers(key, name, unit, v, m.others())
}

// addOthers is add with the other processes' CPU already read.
func (r *results) addOthers(key, name, unit string, v, others float64) {
	f, ok := r.figs[key]
	if !ok {
		f = &figure{key: key, name: name, unit: unit}
		r.figs[key] = f
		r.order = append(r.order, key)
	}
	f.vals = append(f.vals, v)
	f.others = append(f.others, others)
}

func (r *results) get(key string) (*figure, bool) {
	f, ok := r.figs[key]
	return f, ok && len(f.vals) > 0
}

// median is the median of figure key, and whether it was measured.
func (r *results) median(key string) (float64, bool) {
	f, ok := r.get(key)
	if !ok {
		return 0, false
	}
	return f.median(), true
}

func (r *results) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func run(cfg *config) error {
	res := &results{figs: map[string]*figure{}, started: time.Now()}
	idempotencyKeys = cfg.idempotencyKeys
	logf("tickflow bench: %s", cfg.commandLine)
	logf("N=%d reps=%d processors=%d×concurrency %d (tick asks %d steps), authz replicas %d, workers %d, %d requests in flight",
		cfg.n, cfg.reps, cfg.processors, cfg.concurrency, cfg.tickSteps, cfg.authzReplicas, cfg.workerCount(cfg.processors), cfg.inflight)
	body, hdr := tokenSize(uint64(cfg.n))
	res.note("A token is %d bytes of msgpack and %d bytes of headers; the ceiling publishes real tokens (same body, headers, subject shape and Nats-Msg-Id) to a stream configured like HIGH.", body, hdr)

	if cfg.phases["ceiling"] {
		for i := range cfg.reps {
			quiet(cfg)
			m := startMeter()
			c, err := runCeiling(cfg, cfg.n)
			if err != nil {
				return fmt.Errorf("ceiling: %w", err)
			}
			logf("ceiling %d/%d: publish %.0f msgs/s (%.4f CPU-s/1k), consume+ack %.0f msgs/s (%.4f CPU-s/1k)",
				i+1, cfg.reps, c.pubRate, c.pubCPU, c.consRate, c.consCPU)
			res.add("ceil.pub", "Ceiling: JetStream async publish", "msgs/s", c.pubRate, m)
			res.add("ceil.cons", "Ceiling: durable pull consume + ack", "msgs/s", c.consRate, m)
			res.add("ceil.pubcpu", "Ceiling: CPU-s of the process per 1,000 published", "CPU-s/1k", c.pubCPU, m)
			res.add("ceil.conscpu", "Ceiling: CPU-s of the process per 1,000 consumed and acked", "CPU-s/1k", c.consCPU, m)
		}
	}
	// The repetitions of the burn-down, asynq, River and the cost phase
	// alternate (tickflow, asynq, River, cost, tickflow, …), so that a
	// drift of the machine's speed during the run weighs on every side of
	// their ratios alike.
	alternating := []struct {
		phase string
		rep   func(*config, *results, int) error
	}{{"burndown", burnDownRep}, {"asynq", asynqRep}, {"river", riverRep}, {"cost", costRep}}
	var ran []string
	for _, a := range alternating {
		if cfg.phases[a.phase] {
			ran = append(ran, a.phase)
		}
	}
	if len(ran) > 0 {
		defer cleanRiverBuild()
		for i := range cfg.reps {
			for _, a := range alternating {
				if cfg.phases[a.phase] {
					if err := a.rep(cfg, res, i); err != nil {
						return err
					}
				}
			}
		}
		if len(ran) > 1 {
			res.note("The repetitions of the %s phases alternate (%s, then again), so that a drift of the machine's speed during the run weighs on every side of their ratios alike.",
				strings.Join(ran, ", "), strings.Join(ran, ", "))
		}
	}
	if cfg.phases["keyed"] {
		if err := runKeyedPhase(cfg, res); err != nil {
			return err
		}
	}
	if cfg.phases["ticker"] {
		if err := runTickerPhase(cfg, res); err != nil {
			return err
		}
	}
	if cfg.phases["shipped"] {
		if err := runShippedPhase(cfg, res); err != nil {
			return err
		}
	}
	if cfg.phases["throttle"] {
		if err := runThrottlePhase(cfg, res); err != nil {
			return err
		}
	}
	if cfg.phases["soak"] {
		if err := runSoakPhase(cfg, res); err != nil {
			return err
		}
	}
	if cfg.phases["fairness"] {
		if err := runFairnessPhase(cfg, res); err != nil {
			return err
		}
	}
	if cfg.phases["nonatomic"] {
		for i := range cfg.reps {
			quiet(cfg)
			m := startMeter()
			r, err := runBurnDown(cfg, burnOptions{spec: cfg.spec(), label: labelSteps, functions: cfg.nonAtomicFns, n: cfg.nonAtomicBatches,
				units: cfg.nonAtomicFns, profile: i == 0 && cfg.profilePhase == "nonatomic"})
			if err != nil {
				return fmt.Errorf("non-atomic: %w", err)
			}
			logf("tickflow non-atomic %d/%d: %.0f functions/s (submit %.0f batches/s)", i+1, cfg.reps, r.drainRate, r.submitRate)
			res.add("tf.fns", fmt.Sprintf("tickflow non-atomic (%d×%d noop) drain", cfg.nonAtomicBatches, cfg.nonAtomicFns), "functions/s", r.drainRate, m)
		}
	}
	if cfg.phases["latency"] {
		rate, err := latencyRate(cfg, res)
		if err != nil {
			return err
		}
		res.latRate = rate
		for i := range cfg.reps {
			quiet(cfg)
			m := startMeter()
			l, err := runLatency(cfg, rate, cfg.latencyDur, i == 0)
			if err != nil {
				return err
			}
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			logf("latency %d/%d at %.0f batches/s (%d sent, max %d in flight): p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms; authz reply p50 %.2f p99 %.2f ms; %.0f µs CPU a batch",
				i+1, cfg.reps, rate, l.sent, l.maxInflight, ms(percentile(l.e2e, 50)), ms(percentile(l.e2e, 99)), ms(percentile(l.e2e, 99.9)),
				ms(percentile(l.reply, 50)), ms(percentile(l.reply, 99)), l.cpu)
			res.add("lat.p50", "Latency submit → callback, p50", "ms", ms(percentile(l.e2e, 50)), m)
			res.add("lat.p99", "Latency submit → callback, p99", "ms", ms(percentile(l.e2e, 99)), m)
			res.add("lat.p999", "Latency submit → callback, p99.9", "ms", ms(percentile(l.e2e, 99.9)), m)
			res.add("lat.reply50", "Latency submit → authz reply, p50", "ms", ms(percentile(l.reply, 50)), m)
			res.add("lat.reply99", "Latency submit → authz reply, p99", "ms", ms(percentile(l.reply, 99)), m)
			res.add("lat.cpu", "Latency run: CPU a batch (the whole process, the bench's sender and observer included)", "µs/batch", l.cpu, m)
			if l.senderBlocked {
				res.note("Latency run %d: the sender hit its in-flight bound (8192), so it was briefly closed-loop.", i+1)
			}
		}
		if cfg.latencyAsynq {
			if err := asynqLatencyPhase(cfg, res); err != nil {
				return err
			}
		}
	}
	if cfg.phases["scaling"] {
		logf("scaling: processors %v × authz %v, %d batches each", cfg.scaleProcessors, cfg.scaleAuthz, cfg.scaleN)
		rows, err := runScaling(cfg)
		if err != nil {
			return err
		}
		res.scaling = rows
	}
	if cfg.phases["cluster"] {
		for i := range cfg.reps {
			quiet(cfg)
			m := startMeter()
			r, err := runClusterRep(cfg)
			if err != nil {
				return fmt.Errorf("cluster: %w", err)
			}
			logf("cluster %d/%d (%d batches): single node submit %.0f, drain %.0f batches/s; %d-node R3 cluster submit %.0f, drain %.0f batches/s",
				i+1, cfg.reps, cfg.clusterN, r.single.submitRate, r.single.drainRate, clusterNodes, r.cluster.submitRate, r.cluster.drainRate)
			res.add("cl.single", fmt.Sprintf("tickflow drain, single node (cluster phase, N = %d)", cfg.clusterN), "batches/s", r.single.drainRate, m)
			res.add("cl.drain", fmt.Sprintf("tickflow drain, %d-node R%d cluster (N = %d)", clusterNodes, clusterNodes, cfg.clusterN), "batches/s", r.cluster.drainRate, m)
			res.add("cl.submit", fmt.Sprintf("tickflow submit, %d-node R%d cluster (N = %d)", clusterNodes, clusterNodes, cfg.clusterN), "batches/s", r.cluster.submitRate, m)
		}
		res.note("Cluster: %d embedded nodes in this process, routed on loopback, every stream and bucket with %d replicas; authz (and the submitter) connect over TCP to node 1, the workers to node 2, the processors to node 3. Each repetition runs the same burn-down on one server first (in-process connections, as the other phases and `tickflow run`), then on the cluster, so the ratio holds the cost of TCP connections as well as of replication.",
			clusterNodes, clusterNodes)
	}
	if cfg.phases["depth"] {
		logf("depth: %d vs %d queued, %d reps of %d one-step ticks in a child processor", cfg.depthSmall, cfg.depthLarge, cfg.reps, cfg.depthTicks)
		quiet(cfg)
		m := startMeter()
		d, err := runDepth(cfg)
		if err != nil {
			return err
		}
		res.depth = d
		for _, r := range d.smallRuns {
			res.add("depth.small", fmt.Sprintf("Tick (1 step, noop atomic) with %s queued", count(cfg.depthSmall)), "µs", r.MeanUS, m)
		}
		for _, r := range d.largeRuns {
			res.add("depth.large", fmt.Sprintf("Tick (1 step, noop atomic) with %s queued", count(cfg.depthLarge)), "µs", r.MeanUS, m)
		}
		for _, r := range d.smallRuns {
			res.add("rss.small", fmt.Sprintf("Processor VmRSS, %s queued", count(cfg.depthSmall)), "MiB", float64(r.rssKB)/1024, m)
		}
		for _, r := range d.largeRuns {
			res.add("rss.large", fmt.Sprintf("Processor VmRSS, %s queued", count(cfg.depthLarge)), "MiB", float64(r.rssKB)/1024, m)
			res.add("heap.large", fmt.Sprintf("Processor Go heap in use, %s queued", count(cfg.depthLarge)), "MiB", float64(r.HeapInuse)/(1<<20), m)
		}
		res.note("Depth: %s tokens and batch records were written pipelined at %.0f batches/s; the store then took %.0f MiB on disk and the bench process (server, worker) had %d MiB resident. Tick cost is the mean of %d one-step ticks of a child processor over TCP loopback, after %d warm-up ticks; RSS is the child's VmRSS read from /proc/<pid>/status after its ticks.",
			count(cfg.depthLarge), d.fillRate, d.storeMB, d.serverRSSKB>>10, cfg.depthTicks, cfg.depthWarmup)
	}
	if cfg.phases["rtt"] && cfg.rttN > 0 {
		r, err := runRTT(cfg, cfg.rttN)
		if err != nil {
			return fmt.Errorf("rtt: %w", err)
		}
		res.rtt = r
		var sb strings.Builder
		writeRTT(&sb, r)
		fmt.Fprint(os.Stderr, sb.String())
	}
	res.elapsed = time.Since(res.started)
	report := renderReport(cfg, res)
	fmt.Println(report)
	if cfg.out != "-" {
		if err := writeDoc(cfg.out, report); err != nil {
			return err
		}
		logf("wrote %s", cfg.out)
	}
	return nil
}

// quiet waits for the machine to be quiet, if asked to.
func quiet(cfg *config) {
	if cfg.quietWait <= 0 {
		return
	}
	if o := waitQuiet(cfg.quietWait); o >= 0.15 {
		logf("  the machine is not quiet: other processes use %.2f cores; going on", o)
	}
}

// count writes 1000000 as 1M and 1000 as 1k.
func count(n int) string {
	switch {
	case n >= 1000000 && n%1000000 == 0:
		return fmt.Sprintf("%dM", n/1000000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// burnDownRep runs repetition i of the burn-down of atomic batches.
func burnDownRep(cfg *config, res *results, i int) error {
	quiet(cfg)
	m := startMeter()
	r, err := runBurnDown(cfg, burnOptions{spec: cfg.spec(), label: labelAtomic, functions: 1, n: cfg.n, units: 1,
		profile: i == 0 && cfg.profilePhase == "burndown"})
	if err != nil {
		return fmt.Errorf("burn-down: %w", err)
	}
	logf("tickflow burn-down %d/%d: submit %.0f batches/s, drain %.0f batches/s (processors done at %.0f/s)", i+1, cfg.reps, r.submitRate, r.drainRate, r.procRate)
	res.add("tf.submit", "tickflow submit through authz (atomic, 1 noop)", "batches/s", r.submitRate, m)
	res.add("tf.drain", "tickflow drain to callback applied", "batches/s", r.drainRate, m)
	res.add("tf.proc", "tickflow drain to callback published", "batches/s", r.procRate, m)
	return nil
}

// asynqRep runs repetition i of asynq's enqueue and drain.
func asynqRep(cfg *config, res *results, i int) error {
	quiet(cfg)
	m := startMeter()
	a, err := runAsynq(cfg, cfg.n, cfg.asynqConcurrency())
	if err != nil {
		return err
	}
	us := func(cpu float64) float64 { return cpu / float64(cfg.n) * 1e6 }
	logf("asynq %d/%d: enqueue %.0f tasks/s (%.0f µs CPU a task), drain %.0f tasks/s (%.0f µs CPU a task)",
		i+1, cfg.reps, a.enqRate, us(a.enqCPU), a.drainRate, us(a.drainCPU))
	res.add("aq.enq", "asynq enqueue", "tasks/s", a.enqRate, m)
	res.add("aq.drain", fmt.Sprintf("asynq drain (concurrency %d)", cfg.asynqConcurrency()), "tasks/s", a.drainRate, m)
	res.add("aq.enqcpu", "asynq enqueue: CPU a task (asynq's client + redis-server)", "µs/task", us(a.enqCPU), m)
	res.add("aq.draincpu", "asynq drain: CPU a task (asynq's server + redis-server)", "µs/task", us(a.drainCPU), m)
	return nil
}

// riverRep runs repetition i of River's insert and drain.
func riverRep(cfg *config, res *results, i int) error {
	quiet(cfg)
	m := startMeter()
	r, err := runRiver(cfg, cfg.n)
	if err != nil {
		return err
	}
	us := func(cpu float64) float64 { return cpu / float64(cfg.n) * 1e6 }
	ins, drain := float64(cfg.n)/r.InsertSeconds, float64(cfg.n)/r.DrainSeconds
	logf("river %d/%d: insert %.0f jobs/s (%.0f µs CPU a job), drain %.0f jobs/s (%.0f µs CPU a job)",
		i+1, cfg.reps, ins, us(r.InsertCPU+r.InsertPGCPU), drain, us(r.DrainCPU+r.DrainPGCPU))
	res.add("rv.insert", fmt.Sprintf("River insert (InsertMany, %d jobs a call)", riverChunk), "jobs/s", ins, m)
	res.add("rv.drain", fmt.Sprintf("River drain (MaxWorkers %d, FetchCooldown %s)", cfg.riverWorkers, cfg.riverCooldown), "jobs/s", drain, m)
	if r.PGCPUKnown {
		res.add("rv.insertcpu", "River insert: CPU a job (River's client + PostgreSQL)", "µs/job", us(r.InsertCPU+r.InsertPGCPU), m)
		res.add("rv.draincpu", "River drain: CPU a job (River's client + PostgreSQL)", "µs/job", us(r.DrainCPU+r.DrainPGCPU), m)
	}
	return nil
}
