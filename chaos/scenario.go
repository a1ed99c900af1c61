package chaos

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/streams"
)

// Scenario is one kind of trouble and the load it hits. The zero value of
// a field means no such trouble, or the default.
type Scenario struct {
	// Name selects the scenario (-scenarios); About says what it does.
	Name, About string
	// Batches is how many batches it submits unless Options.Batches says.
	Batches int
	// Servers is 1, or 3 for a cluster with three replicas of everything.
	Servers int
	// Label is the non-atomic label (LabelSteps or LabelSlow); Functions
	// the functions per batch; SleepMS how long each works.
	Label     string
	Functions int
	SleepMS   int
	// AtomicRate, FailRate and FlakyRate are the shares of batches that run
	// atomically, fail for good at one function, and fail once first.
	AtomicRate, FailRate, FlakyRate float64
	// PlainRate is the share of batches sent without an idempotency key,
	// as a caller that cannot retry safely sends them: once, and never
	// again after an answer that did not come (Submission.Plain).
	PlainRate float64
	// WorkTimeout is the processors' worker deadline, AckWait how long a
	// processor holds a token, WorkerConcurrency each worker's slots.
	WorkTimeout, AckWait time.Duration
	WorkerConcurrency    int
	// TickSteps is the step count of each tick, so each processor runs up
	// to that many steps at once. Default 8.
	TickSteps int
	// Kill lists the kinds of process killed (-9) at random moments, one
	// every KillEvery[0] to KillEvery[1], each down Down[0] to Down[1].
	Kill      []string
	KillEvery [2]time.Duration
	Down      [2]time.Duration
	// ServerKills are the moments after the first submission at which a
	// server is killed (-9) and started again on its store after
	// ServerDown: the only one, or on a cluster the leader of the MED
	// stream. Submissions go on meanwhile, so the system is busy, and a
	// kill waits until the servers have been back for a few seconds.
	ServerKills []time.Duration
	ServerDown  time.Duration
	// Spread is the time the submissions are spread over.
	Spread time.Duration
	// Deadline bounds the burn-down; batches unfinished then are lost.
	Deadline time.Duration
}

// Options configure a run of scenarios.
type Options struct {
	// Seed makes the batches and the kill schedule reproducible (the
	// interleaving of processes is not).
	Seed uint64
	// Batches, when positive, replaces every scenario's batch count.
	Batches int
	// Dir is where each run gets its directory. Required.
	Dir string
	// Root is the repository root; Bin the built commands. Required.
	Root string
	Bin  Binaries
	// Progress, when set, receives a line per phase of each run.
	Progress io.Writer
}

// Result is one run of a scenario.
type Result struct {
	Scenario string
	Rep      int
	Verdict  *Verdict
	// Kills and Exits count, per kind of process, the kills dealt and the
	// exits the suite did not cause.
	Kills, Exits map[string]int
	Elapsed      time.Duration
	// Dir holds the run's configs, stores and logs.
	Dir string
	// Err is a failure of the harness itself: the run proves nothing.
	Err error
}

// Passed reports whether the run completed and every invariant held.
func (r *Result) Passed() bool { return r.Err == nil && r.Verdict != nil && r.Verdict.Passed() }

// clients is how many goroutines submit at once.
const clients = 8

// Run runs scenario sc once, as repetition rep.
func Run(ctx context.Context, sc Scenario, rep int, o Options) *Result {
	start := time.Now()
	res := &Result{Scenario: sc.Name, Rep: rep, Dir: filepath.Join(o.Dir, fmt.Sprintf("%s-%d", sc.Name, rep))}
	res.Verdict, res.Err = run(ctx, sc, rep, o, res)
	res.Elapsed = time.Since(start)
	return res
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

func run(ctx context.Context, sc Scenario, rep int, o Options, res *Result) (*Verdict, error) {
	if err := os.MkdirAll(res.Dir, 0o755); err != nil {
		return nil, err
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", sc.Name, rep)
	rng := rand.New(rand.NewPCG(o.Seed, h.Sum64()))
	n := sc.Batches
	if o.Batches > 0 {
		n = o.Batches
	}
	subs := plan(sc, rep, o.Seed, n, rng)

	settings := streams.DefaultSettings()
	if sc.AckWait > 0 {
		settings.AckWait = sc.AckWait
	}
	o.progress("%s #%d: starting %d server(s) and the components in %s", sc.Name, rep, max(sc.Servers, 1), res.Dir)
	sys, err := StartSystem(ctx, SystemConfig{
		Dir: res.Dir, Root: o.Root, Bin: o.Bin, Servers: sc.Servers, Settings: settings,
		WorkerConcurrency: sc.WorkerConcurrency, WorkTimeout: sc.WorkTimeout, TickSteps: sc.TickSteps,
	})
	if err != nil {
		return nil, err
	}
	defer sys.Stop()
	conns := map[string]*nats.Conn{}
	for _, u := range []string{"alice", "bob", "admin"} {
		nc, err := sys.Connect(u)
		if err != nil {
			return nil, err
		}
		defer nc.Close()
		conns[u] = nc
	}

	// Trouble runs from the first submission until every batch is done.
	chaosCtx, stopChaos := context.WithCancel(ctx)
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		killAtRandom(chaosCtx, sys, sc, rand.New(rand.NewPCG(o.Seed, h.Sum64()+1)))
	}()
	defer func() {
		stopChaos()
		<-chaosDone
	}()
	submitted := make(chan error, 1)
	deadline := sc.Deadline
	if deadline == 0 {
		deadline = 2 * time.Minute
	}
	runCtx, cancelRun := context.WithTimeout(ctx, deadline)
	defer cancelRun()
	o.progress("%s #%d: submitting %d batches", sc.Name, rep, n)
	go func() { submitted <- SubmitAll(runCtx, conns, subs, clients, sc.Spread) }()
	if err := burnDown(runCtx, sys, sc, o, subs, conns["admin"], submitted); err != nil {
		return nil, err
	}
	stopChaos()
	<-chaosDone
	res.Kills, res.Exits = sys.Counts()

	o.progress("%s #%d: settling", sc.Name, rep)
	if err := settle(ctx, sys, conns["admin"], settings.AckWait); err != nil {
		o.progress("%s #%d: not settled: %v", sc.Name, rep, err)
	}
	sys.StopComponents()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := ReadState(rctx, conns["admin"], sys.ExecDir)
	if err != nil {
		return nil, err
	}
	return Check(subs, st, sys.Journal().Kills()), nil
}

// plan draws the batches of a run.
func plan(sc Scenario, rep int, seed uint64, n int, rng *rand.Rand) []*Submission {
	label := sc.Label
	if label == "" {
		label = LabelSteps
	}
	fns := max(sc.Functions, 1)
	subs := make([]*Submission, n)
	for i := range subs {
		spec := Spec{Label: label, Steps: make([]Step, fns)}
		if rng.Float64() < sc.AtomicRate {
			spec.Label = LabelAtomic
		}
		for j := range spec.Steps {
			spec.Steps[j].SleepMS = sc.SleepMS
		}
		// An atomic unit's earlier functions would take effect, then be
		// rolled back, on every failing attempt: its failures go first.
		at := func() int {
			if spec.Atomic() {
				return 0
			}
			return rng.IntN(fns)
		}
		if rng.Float64() < sc.FlakyRate {
			spec.Steps[at()].FailAttempts = 1
		}
		if rng.Float64() < sc.FailRate {
			spec.Steps[at()].Fail = true
		}
		subs[i] = &Submission{
			Key:  fmt.Sprintf("%s-%d-%d-%d", sc.Name, rep, seed, i),
			User: []string{"alice", "bob"}[i%2],
			Spec: spec,
		}
		// Drawn only where asked, so that the other scenarios' loads stay
		// what their seeds made them.
		if sc.PlainRate > 0 && rng.Float64() < sc.PlainRate {
			subs[i].Plain = true
		}
	}
	return subs
}
