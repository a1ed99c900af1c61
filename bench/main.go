// Command bench measures tickflow against raw JetStream (the ceiling),
// asynq on a local Redis and River on a local PostgreSQL, on this machine,
// in one run: the shipped wiring
// (drain with 1, 2 and 4 replicas beside the back-to-back drain, idle CPU,
// latency, a throttle shared by replicas), burn-down throughput, non-atomic
// function throughput, open-loop latency, scaling with replicas, a
// three-node cluster, the cost of a tick with a shallow and a deep
// queue, and the cost of a batch as shipped (stored messages, deliveries
// and CPU, submitted one Send a batch and with send_many). It prints one table and writes it, with
// the machine description and the exact command, into docs/benchmarks.md.
//
//	cd bench && go run . -quick     # a few minutes
//	cd bench && go run .            # the full run, under 20 minutes
//
// It is a module of its own so that asynq and go-redis stay out of
// tickflow's go.mod.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/system"

	tfconfig "github.com/tickflow/tickflow/config"
)

type config struct {
	quick            bool
	n                int
	reps             int
	nonAtomicBatches int
	nonAtomicFns     int
	inflight         int
	sendMany         int
	idempotencyKeys  bool
	authzReplicas    int
	processors       int
	concurrency      int
	tickSteps        int
	workerConc       int
	asynqConc        int
	riverWorkers     int
	riverCooldown    time.Duration
	riverDir         string
	riverBin         string
	idle             time.Duration
	idleWait         time.Duration
	latencyDur       time.Duration
	latencyRate      float64
	latencyShipped   bool
	latencyAsynq     bool
	depthSmall       int
	depthLarge       int
	depthTicks       int
	depthWarmup      int
	rttN             int
	fairnessN        int
	// finishedAge, when set, is streams.Settings.FinishedMaxAge of every
	// server the bench starts (the soak phase sets it).
	finishedAge      time.Duration
	soakDuration     time.Duration
	soakRetention    time.Duration
	stall            time.Duration
	phases           map[string]bool
	natsConf         string
	tmpDir           string
	out              string
	cpuprofile       string
	memprofile       string
	tracefile        string
	latencyLog       string
	latencyMessages  bool
	phaseList        string
	commandLine      string
	profilePhase     string
	verbose          bool
	memory           bool
	quietWait        time.Duration
	workers          int
	scaleProcList    string
	scaleAuthzList   string
	scaleProcessors  []int
	scaleAuthz       []int
	scaleN           int
	scaleReps        int
	tickerEvery      time.Duration
	tickerSteps      int
	tickerDur        time.Duration
	clusterN         int
	shippedProcList  string
	shippedProcs     []int
	shippedN         int
	shippedReps      int
	throttleRate     int
	throttleReplicas int
	throttleWindow   time.Duration
}

// workerCount is how many workers run beside p processor replicas.
func (c *config) workerCount(p int) int {
	if c.workers > 0 {
		return c.workers
	}
	return p
}

// runTickerSteps is the step count of the ticker `tickflow run` starts.
const runTickerSteps = system.TickSteps

// idleText says what a processor ticked back to back does after a tick
// that found no messages.
func (c *config) idleText() string {
	if c.idleWait > 0 {
		return fmt.Sprintf("a wait for work of at most %s (Processor.WaitWork)", c.idleWait)
	}
	return fmt.Sprintf("a %s pause", c.idle)
}

func (c *config) workerConcurrency() int {
	if c.workerConc > 0 {
		return c.workerConc
	}
	return max(64, c.processors*c.concurrency)
}

func (c *config) asynqConcurrency() int {
	if c.asynqConc > 0 {
		return c.asynqConc
	}
	return c.processors * c.concurrency
}

// optionalPhases run only when -phases names them.
var optionalPhases = []string{"fairness", "soak"}

var allPhases = []string{"ceiling", "burndown", "ticker", "shipped", "throttle", "nonatomic", "asynq", "river", "cost", "latency", "scaling", "cluster", "depth", "rtt", "keyed"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == childCommand {
		os.Exit(childMain(os.Args[2:]))
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.BoolVar(&c.quick, "quick", false, "a quick run: smaller N, shorter latency run, shallower deep queue (flags given explicitly win)")
	fs.IntVar(&c.n, "n", 100000, "batches (and asynq tasks, and ceiling messages) of a burn-down")
	fs.IntVar(&c.reps, "reps", 3, "repetitions of every figure (each figure is the median, with min and max)")
	fs.IntVar(&c.nonAtomicBatches, "nonatomic", 10000, "non-atomic batches of the function-throughput run")
	fs.IntVar(&c.nonAtomicFns, "functions", 10, "no-op functions per non-atomic batch")
	fs.IntVar(&c.inflight, "inflight", 256, "goroutines submitting at once, each with one Send (or one send_many) at a time (and asynq enqueuers)")
	fs.BoolVar(&c.idempotencyKeys, "idempotency-keys", false, "give every batch the phases submit in bulk (burn-down, cost, sustained, soak, keyed) an idempotency key of its own (the Go client then sends each alone, and send_many submits each alone)")
	fs.IntVar(&c.sendMany, "send-many", 100, "batches a send_many request carries in the cost phase's second submit, beside the single sends (0: no send_many rows)")
	fs.IntVar(&c.authzReplicas, "authz", 1, "authz replicas")
	fs.IntVar(&c.processors, "processors", 2, "processor replicas, each ticked back to back")
	fs.IntVar(&c.concurrency, "concurrency", 128, "steps one tick runs at once (processor Options.Concurrency)")
	fs.IntVar(&c.tickSteps, "tick-steps", 256, "steps each tick asks for (and processor Options.MaxSteps)")
	fs.IntVar(&c.workers, "workers", 0, "worker replicas, each on its own connection (0: one per processor replica)")
	fs.IntVar(&c.workerConc, "worker-concurrency", 0, "Options.Concurrency of each worker (0: max(64, processors×concurrency))")
	fs.IntVar(&c.asynqConc, "asynq-concurrency", 0, "asynq server concurrency (0: processors×concurrency)")
	fs.IntVar(&c.riverWorkers, "river-workers", 100, "MaxWorkers of River's queue")
	fs.DurationVar(&c.riverCooldown, "river-fetch-cooldown", 2*time.Millisecond, "River's FetchCooldown")
	fs.StringVar(&c.riverDir, "river-dir", "", "the River program's module (default: the repository's bench/river)")
	fs.StringVar(&c.riverBin, "river-bin", "", "a River program built beforehand from bench/river, run instead of building -river-dir (for a machine without Go)")
	fs.DurationVar(&c.idleWait, "idle-wait", time.Second, "after a tick that found no messages, wait for work (processor WaitWork) at most this long; 0: pause -idle instead")
	fs.DurationVar(&c.idle, "idle", 200*time.Microsecond, "pause after a tick that found no messages, with -idle-wait 0")
	fs.DurationVar(&c.latencyDur, "latency-duration", 20*time.Second, "length of each open-loop latency run")
	fs.BoolVar(&c.latencyShipped, "latency-shipped", false, "run the latency phase's open-loop runs with the processors wired as shipped (Run in the ready pace, and the run's ticker) instead of ticked back to back by the bench")
	fs.BoolVar(&c.latencyAsynq, "latency-asynq", true, "after the latency phase's runs, the same definition applied to asynq (its own sustained rate, then open loop at half of it, its workers looking for new tasks every 1 ms and, once, every 1 s as by default) and tickflow offered that rate too (needs redis-server, as the asynq phase does)")
	fs.Float64Var(&c.latencyRate, "latency-rate", 0, "offered batches/s of the latency run (0: half the rate sustained with submit and drain running together, measured first)")
	fs.IntVar(&c.depthSmall, "depth-small", 1000, "shallow queue depth of the tick-cost comparison")
	fs.IntVar(&c.depthLarge, "depth-large", 1000000, "deep queue depth of the tick-cost comparison")
	fs.IntVar(&c.depthTicks, "depth-ticks", 300, "timed one-step ticks per child run")
	fs.IntVar(&c.depthWarmup, "depth-warmup", 30, "untimed ticks before them")
	fs.DurationVar(&c.soakDuration, "soak-duration", 10*time.Minute, "how long the soak phase runs at full speed")
	fs.DurationVar(&c.soakRetention, "soak-retention", 10*time.Second, "how long the soak phase keeps finished batches (streams.finished_max_age)")
	fs.IntVar(&c.fairnessN, "fairness-n", 20000, "keyed idempotent batches alice records before the fairness phase's listings")
	fs.IntVar(&c.rttN, "rtt-n", 2000, "batches of the message-count run (round trips per batch)")
	fs.StringVar(&c.scaleProcList, "scale-processors", "1,2,4", "processor replicas of the scaling phase, comma-separated")
	fs.StringVar(&c.scaleAuthzList, "scale-authz", "1,2", "authz replicas of the scaling phase, comma-separated")
	fs.IntVar(&c.scaleN, "scale-n", 20000, "batches of each scaling burn-down")
	fs.IntVar(&c.scaleReps, "scale-reps", 1, "repetitions of each scaling combination (the median drain is kept)")
	fs.DurationVar(&c.tickerEvery, "ticker-every", tfconfig.DefaultRun().TickEvery, "interval of the ticker-driven drain (default: tickflow run's)")
	fs.IntVar(&c.tickerSteps, "ticker-steps", runTickerSteps, "steps each tick of the ticker-driven drain asks for (default: tickflow run's)")
	fs.DurationVar(&c.tickerDur, "ticker-duration", 10*time.Second, "about how long the ticker-driven drain runs: it drains what the ticker's bound allows in this time")
	fs.StringVar(&c.shippedProcList, "shipped-processors", "1,2,4", "processor replicas of the shipped phase's drains, comma-separated")
	fs.IntVar(&c.shippedN, "shipped-n", 20000, "batches of each drain of the shipped phase (as shipped, and its back-to-back baseline), and of its sustained run")
	fs.IntVar(&c.shippedReps, "shipped-reps", 3, "pairs (back to back, as shipped) per replica count in the shipped phase, in alternating order; the ratio is the median of the pairs'")
	fs.IntVar(&c.throttleRate, "throttle-rate", 200, "steps per second the throttle phase throttles its domain to")
	fs.IntVar(&c.throttleReplicas, "throttle-replicas", 3, "processor replicas sharing the throttle phase's throttle")
	fs.DurationVar(&c.throttleWindow, "throttle-window", 5*time.Second, "whole seconds over which the throttle phase counts the steps run, with a backlog throughout")
	fs.IntVar(&c.clusterN, "cluster-n", 10000, "batches of each burn-down of the cluster phase (single node and cluster)")
	fs.DurationVar(&c.stall, "stall", 2*time.Minute, "give up when a drain makes no progress for this long")
	fs.StringVar(&c.phaseList, "phases", strings.Join(allPhases, ","), "phases to run, comma-separated")
	fs.StringVar(&c.natsConf, "nats-conf", "", "nats.conf to load (default: the repository's)")
	fs.StringVar(&c.tmpDir, "tmp", os.TempDir(), "where servers keep their stores")
	fs.StringVar(&c.out, "out", "", "markdown file to write the results into (default: the repository's docs/benchmarks.md; - for none)")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write CPU profiles of the first burn-down to `file` (drain) and file.submit (submit); every component runs in this process, labelled role=<nats user> (go tool pprof -tags)")
	fs.BoolVar(&mutexProfile, "mutexprofile", false, "with -cpuprofile, also write the contention on mutexes (runtime.SetMutexProfileFraction 10) to file.mutex and the goroutines' waits of 10µs or more (runtime.SetBlockProfileRate) to file.block, both cumulative from the profile's start; the burn-down's submit writes file.submit.mutex and file.submit.block, the base to subtract from the drain's (go tool pprof -base)")
	fs.StringVar(&c.memprofile, "memprofile", "", "write an allocation profile of the first burn-down to `file`, its base to file.base, and the allocations up to the drain's start to file.submit (the submit's are file.submit less file.base, the drain's file less file.submit)")
	fs.StringVar(&c.tracefile, "trace", "", "write a runtime execution trace of the first latency run to `file` (go tool trace)")
	fs.StringVar(&c.latencyLog, "latency-log", "", "write each batch of the first latency run to `file`: its scheduled time from the run's start, then submit → authz reply and submit → callback, in µs")
	fs.BoolVar(&c.latencyMessages, "latency-messages", false, "count the messages of the first latency run by class and role, per batch (an observer on every subject: its latencies are not comparable)")
	fs.StringVar(&c.profilePhase, "profile-phase", "burndown", "which phase -cpuprofile/-memprofile cover: burndown, cost (the burn-down submitted with send_many), nonatomic, depth (the server side of the deep-queue ticks; CPU only), latency (the first open-loop run: CPU, and the allocations from its start, FILE.base to subtract) or soak (the live heap a third of the way in, file.third, and at the end; memory only)")
	fs.DurationVar(&c.quietWait, "quiet-wait", 0, "before each repetition, wait up to this long for other processes to leave the CPU idle (< 0.15 core); 0: do not wait")
	fs.BoolVar(&c.verbose, "v", false, "log tick statistics of each burn-down")
	fs.BoolVar(&c.memory, "memory", false, "provision streams and buckets in memory instead of on file (a comparison, not the configuration measured)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if c.quick {
		for name, v := range map[string]any{
			"n": 10000, "nonatomic": 1000, "latency-duration": 5 * time.Second,
			"depth-large": 200000, "depth-ticks": 200, "rtt-n": 1000,
			"scale-n": 5000, "ticker-duration": 5 * time.Second, "cluster-n": 2000,
			"shipped-n": 5000, "shipped-reps": 2, "throttle-window": 3 * time.Second,
		} {
			if set[name] {
				continue
			}
			switch p := v.(type) {
			case int:
				_ = fs.Set(name, fmt.Sprint(p))
			case time.Duration:
				_ = fs.Set(name, p.String())
			}
		}
	}
	c.phases = map[string]bool{}
	for p := range strings.SplitSeq(c.phaseList, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		ok := false
		for _, a := range append(slices.Clone(allPhases), optionalPhases...) {
			ok = ok || a == p
		}
		if !ok {
			return nil, fmt.Errorf("unknown phase %q (phases: %s; also %s)", p, strings.Join(allPhases, ","), strings.Join(optionalPhases, ","))
		}
		c.phases[p] = true
	}
	if c.riverWorkers < 1 || c.riverCooldown <= 0 {
		return nil, fmt.Errorf("-river-workers must be ≥ 1 and -river-fetch-cooldown positive (got %d, %s)", c.riverWorkers, c.riverCooldown)
	}
	if c.reps < 1 || c.n < 1 || c.processors < 1 || c.concurrency < 1 || c.authzReplicas < 1 || c.inflight < 1 {
		return nil, errors.New("-reps, -n, -processors, -concurrency, -authz and -inflight must be ≥ 1")
	}
	if c.sendMany < 0 || c.sendMany > api.MaxSendMany {
		return nil, fmt.Errorf("-send-many must be 0 (none) to %d batches a request (got %d)", api.MaxSendMany, c.sendMany)
	}
	if c.scaleN < 1 || c.scaleReps < 1 || c.clusterN < 1 || c.tickerSteps < 1 || c.workers < 0 {
		return nil, errors.New("-scale-n, -scale-reps, -cluster-n and -ticker-steps must be ≥ 1, -workers ≥ 0")
	}
	if c.shippedN < 1 || c.shippedReps < 1 || c.throttleRate < 1 || c.throttleReplicas < 1 {
		return nil, fmt.Errorf("-shipped-n, -shipped-reps, -throttle-rate and -throttle-replicas must be ≥ 1 (got %d, %d, %d, %d)",
			c.shippedN, c.shippedReps, c.throttleRate, c.throttleReplicas)
	}
	if c.throttleWindow < time.Second || c.throttleWindow%time.Second != 0 {
		return nil, fmt.Errorf("-throttle-window must be a whole number of seconds, at least 1s (got %s): the throttle's budget is per second of the clock", c.throttleWindow)
	}
	if c.tickerEvery < time.Millisecond || c.tickerDur <= 0 {
		return nil, fmt.Errorf("-ticker-every must be at least 1ms (got %s) and -ticker-duration positive (got %s)", c.tickerEvery, c.tickerDur)
	}
	var err error
	if c.scaleProcessors, err = parseCounts("scale-processors", c.scaleProcList); err != nil {
		return nil, err
	}
	if c.scaleAuthz, err = parseCounts("scale-authz", c.scaleAuthzList); err != nil {
		return nil, err
	}
	if c.shippedProcs, err = parseCounts("shipped-processors", c.shippedProcList); err != nil {
		return nil, err
	}
	root, err := repoRoot()
	if err != nil && (c.natsConf == "" || c.out == "" || (c.riverDir == "" && c.riverBin == "")) {
		return nil, err
	}
	if c.natsConf == "" {
		c.natsConf = filepath.Join(root, "nats.conf")
	}
	if c.out == "" {
		c.out = filepath.Join(root, "docs", "benchmarks.md")
	}
	if c.riverDir == "" {
		c.riverDir = filepath.Join(root, "bench", "river")
	}
	c.commandLine = "cd bench && go run ."
	if len(args) > 0 {
		c.commandLine += " " + strings.Join(args, " ")
	}
	return c, nil
}

// repoRoot finds the tickflow repository: the nearest directory above the
// working directory holding nats.conf and a go.mod.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		_, e1 := os.Stat(filepath.Join(dir, "nats.conf"))
		_, e2 := os.Stat(filepath.Join(dir, "go.mod"))
		if e1 == nil && e2 == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the repository (nats.conf and go.mod) above the working directory: run from bench/ or pass -nats-conf and -out")
		}
		dir = parent
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
