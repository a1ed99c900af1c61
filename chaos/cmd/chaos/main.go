// Command chaos runs tickflow's chaos suite (package chaos): it builds the
// commands, runs each scenario against the system as separate processes,
// prints a table per scenario and a last line "chaos: N passed, M failed",
// and exits 1 when a run failed.
//
//	go run ./chaos/cmd/chaos                          # every scenario once (make chaos)
//	go run ./chaos/cmd/chaos -scenarios kill-workers -reps 3 -seed 42
//	go run ./chaos/cmd/chaos -list
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tickflow/tickflow/chaos"
)

func main() {
	code, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
	}
	os.Exit(code)
}

func run() (int, error) {
	seed := flag.Uint64("seed", 0, "seed of the batches and the kill schedule (0: from the clock; the seed used is printed)")
	batches := flag.Int("batches", 0, "batches per run, replacing each scenario's own count (0: the scenario's)")
	names := flag.String("scenarios", "all", "comma-separated `names` of the scenarios to run (see -list)")
	reps := flag.Int("reps", 1, "runs of each scenario")
	dir := flag.String("dir", "", "`directory` for the runs' configs, stores and logs (default: a new temporary one)")
	keep := flag.Bool("keep", false, "keep the directories of passing runs too")
	quiet := flag.Bool("q", false, "print only the tables, not each run's progress")
	list := flag.Bool("list", false, "list the scenarios and exit")
	flag.Parse()
	if *list {
		for _, sc := range chaos.Scenarios() {
			fmt.Printf("%-16s %4d batches  %s\n", sc.Name, sc.Batches, sc.About)
		}
		return 0, nil
	}
	if *reps < 1 || *batches < 0 {
		return 2, fmt.Errorf("-reps must be ≥ 1 and -batches ≥ 0 (got %d and %d)", *reps, *batches)
	}
	scenarios, err := chaos.Select(*names)
	if err != nil {
		return 2, err
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	root, err := chaos.FindRoot()
	if err != nil {
		return 1, err
	}
	work := *dir
	if work == "" {
		if work, err = os.MkdirTemp("", "tickflow-chaos-"); err != nil {
			return 1, err
		}
	}
	var progress io.Writer = os.Stderr
	if *quiet {
		progress = nil
	}
	fmt.Fprintf(os.Stderr, "chaos: seed %d (rerun with -seed %d); building into %s\n", *seed, *seed, work)
	bin, err := chaos.Build(ctx, root, filepath.Join(work, "bin"))
	if err != nil {
		return 1, err
	}
	o := chaos.Options{Seed: *seed, Batches: *batches, Dir: work, Root: root, Bin: bin, Progress: progress}
	var all []*chaos.Result
	for _, sc := range scenarios {
		var results []*chaos.Result
		for rep := 1; rep <= *reps && ctx.Err() == nil; rep++ {
			r := chaos.Run(ctx, sc, rep, o)
			if r.Passed() && !*keep {
				_ = os.RemoveAll(r.Dir)
			}
			results = append(results, r)
		}
		chaos.Report(os.Stdout, sc, results)
		all = append(all, results...)
	}
	fmt.Println()
	_, failed := chaos.Summary(os.Stdout, all)
	if failed == 0 && !*keep && *dir == "" {
		_ = os.RemoveAll(work)
	}
	if ctx.Err() != nil {
		return 1, ctx.Err()
	}
	if failed > 0 {
		return 1, nil
	}
	return 0, nil
}
