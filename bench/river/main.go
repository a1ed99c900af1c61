// Command river is the bench's River side: against a PostgreSQL the bench
// started, it migrates River's schema, inserts n no-op jobs with
// InsertMany, then starts a River client and measures until River has
// recorded every job completed. It prints one JSON object (result) on
// stdout.
//
// It is a module of its own so that River, pgx and their dependencies stay
// out of the bench's go.mod, whose versions are the ones tickflow is
// measured with.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// result is what one run measured. CPU figures are seconds: the process's
// own (River's client: inserter, producer, workers, completer) and
// PostgreSQL's (the postmaster and every backend).
type result struct {
	N             int     `json:"n"`
	InsertSeconds float64 `json:"insert_s"`
	DrainSeconds  float64 `json:"drain_s"`
	InsertCPU     float64 `json:"insert_cpu_s"`
	DrainCPU      float64 `json:"drain_cpu_s"`
	InsertPGCPU   float64 `json:"insert_pg_cpu_s"`
	DrainPGCPU    float64 `json:"drain_pg_cpu_s"`
	PGCPUKnown    bool    `json:"pg_cpu_known"`
}

// noopArgs are the arguments of the no-op job.
type noopArgs struct{}

// Kind names the no-op job.
func (noopArgs) Kind() string { return "noop" }

// noopWorker works the no-op job.
type noopWorker struct {
	river.WorkerDefaults[noopArgs]
	worked *atomic.Int64
}

// Work counts the job and does nothing else.
func (w *noopWorker) Work(context.Context, *river.Job[noopArgs]) error {
	w.worked.Add(1)
	return nil
}

type options struct {
	url           string
	n             int
	maxWorkers    int
	fetchCooldown time.Duration
	fetchPoll     time.Duration
	chunk         int
	inserters     int
	pgPID         int
	stall         time.Duration
}

func main() {
	var o options
	fs := flag.NewFlagSet("river", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", "", "PostgreSQL connection URL (required)")
	fs.IntVar(&o.n, "n", 100000, "no-op jobs to insert and drain")
	fs.IntVar(&o.maxWorkers, "max-workers", 100, "MaxWorkers of the default queue")
	fs.DurationVar(&o.fetchCooldown, "fetch-cooldown", 2*time.Millisecond, "Config.FetchCooldown")
	fs.DurationVar(&o.fetchPoll, "fetch-poll", time.Second, "Config.FetchPollInterval (River's default; with a backlog River fetches again as soon as a worker slot frees, after FetchCooldown)")
	fs.IntVar(&o.chunk, "chunk", 1000, "jobs per InsertMany call")
	fs.IntVar(&o.inserters, "inserters", 4, "InsertMany calls in flight at once")
	fs.IntVar(&o.pgPID, "pg-pid", 0, "pid of the postmaster, to measure PostgreSQL's CPU (0: not measured)")
	fs.DurationVar(&o.stall, "stall", 2*time.Minute, "give up when the drain makes no progress for this long")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if o.url == "" || o.n < 1 || o.maxWorkers < 1 || o.chunk < 1 || o.inserters < 1 {
		fmt.Fprintln(os.Stderr, "river: -url is required; -n, -max-workers, -chunk and -inserters must be ≥ 1")
		os.Exit(2)
	}
	if o.fetchPoll < o.fetchCooldown {
		fmt.Fprintf(os.Stderr, "river: -fetch-poll (%s) must be at least -fetch-cooldown (%s)\n", o.fetchPoll, o.fetchCooldown)
		os.Exit(2)
	}
	r, err := run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "river:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (*result, error) {
	pool, err := pgxpool.New(ctx, o.url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	driver := riverpgxv5.New(pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	var worked atomic.Int64
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &noopWorker{worked: &worked}); err != nil {
		return nil, err
	}
	client, err := river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.maxWorkers}},
		Workers:           workers,
		FetchCooldown:     o.fetchCooldown,
		FetchPollInterval: o.fetchPoll,
		Logger:            quietLogger(),
	})
	if err != nil {
		return nil, err
	}
	r := &result{N: o.n}

	cpu0, pg0 := selfCPU(), treeCPU(o.pgPID)
	t0 := time.Now()
	if err := insertAll(ctx, client, o); err != nil {
		return nil, err
	}
	r.InsertSeconds = time.Since(t0).Seconds()
	cpu1, pg1 := selfCPU(), treeCPU(o.pgPID)
	r.InsertCPU = cpu1 - cpu0
	r.InsertPGCPU = pg1 - pg0

	// A completion event is sent once River has recorded the job
	// completed in the database; the channel holds every one of them, so
	// none is dropped.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: o.n + 1, Kinds: []river.EventKind{
		river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled, river.EventKindJobSnoozed,
	}})
	defer cancel()
	t0 = time.Now()
	if err := client.Start(ctx); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	completed, stalled := 0, time.NewTimer(o.stall)
	defer stalled.Stop()
	for completed < o.n {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				_ = client.Stop(ctx)
				return nil, fmt.Errorf("job %d: %s, want completed", ev.Job.ID, ev.Kind)
			}
			completed++
			stalled.Reset(o.stall)
		case <-stalled.C:
			_ = client.Stop(ctx)
			return nil, fmt.Errorf("stalled at %d of %d jobs completed (%d worked)", completed, o.n, worked.Load())
		}
	}
	r.DrainSeconds = time.Since(t0).Seconds()
	cpu2, pg2 := selfCPU(), treeCPU(o.pgPID)
	r.DrainCPU = cpu2 - cpu1
	r.DrainPGCPU = pg2 - pg1
	r.PGCPUKnown = o.pgPID > 0 && pg0 >= 0
	stopCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if err := client.Stop(stopCtx); err != nil {
		return nil, fmt.Errorf("stop: %w", err)
	}
	var done int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&done); err != nil {
		return nil, fmt.Errorf("count completed jobs: %w", err)
	}
	if done != o.n || worked.Load() != int64(o.n) {
		return nil, fmt.Errorf("%d jobs completed in the database and %d worked, want %d of each", done, worked.Load(), o.n)
	}
	return r, nil
}

// insertAll inserts o.n no-op jobs with InsertMany, o.chunk a call, with
// o.inserters calls in flight.
func insertAll(ctx context.Context, client *river.Client[pgx.Tx], o options) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range o.inserters {
		wg.Go(func() {
			params := make([]river.InsertManyParams, 0, o.chunk)
			for {
				from := next.Add(int64(o.chunk)) - int64(o.chunk)
				if from >= int64(o.n) {
					return
				}
				params = params[:0]
				for range min(int64(o.chunk), int64(o.n)-from) {
					params = append(params, river.InsertManyParams{Args: noopArgs{}})
				}
				if _, err := client.InsertMany(ctx, params); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("insert: %w", err) })
					next.Store(int64(o.n))
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// quietLogger passes River's errors to stderr and nothing else, so that
// a failing fetch or completion is told, not hidden behind a stall.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// selfCPU is the CPU-seconds this process has used.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
