package main

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// scaleRow is one combination of the scaling phase: the burn-down with p
// processor replicas, a authz replicas and w workers, each on its own
// connection.
type scaleRow struct {
	processors, authz, workers int
	submit, drain              scaleFigure
	others                     float64 // cores other processes used meanwhile
}

// scaleFigure is one half of a burn-down seen as throughput and cost.
type scaleFigure struct {
	rate     float64 // batches/s
	cpuPer1k float64 // CPU-seconds of the whole process per 1,000 batches
	cores    float64 // CPU-seconds per second of the half
}

func newScaleFigure(n int, rate, cpu, seconds float64) scaleFigure {
	f := scaleFigure{rate: rate, cpuPer1k: cpu / float64(n) * 1000}
	if seconds > 0 {
		f.cores = cpu / seconds
	}
	return f
}

// runScaling runs a burn-down of cfg.scaleN batches for every combination
// of processor and authz replicas, cfg.scaleReps times each, and keeps the
// repetition with the median drain rate. Throughput that stays flat while
// replicas are added and the process uses fewer cores than the machine has
// points at a serial bound rather than at the CPU.
func runScaling(cfg *config) ([]scaleRow, error) {
	var rows []scaleRow
	for _, a := range cfg.scaleAuthz {
		for _, p := range cfg.scaleProcessors {
			sp := envSpec{processors: p, authz: a, workers: cfg.workerCount(p)}
			var reps []scaleRow
			for i := range cfg.scaleReps {
				quiet(cfg)
				m := startMeter()
				r, err := runBurnDown(cfg, burnOptions{spec: sp, label: labelAtomic, functions: 1, n: cfg.scaleN, units: 1})
				if err != nil {
					return nil, fmt.Errorf("scaling (%d processors, %d authz): %w", p, a, err)
				}
				row := scaleRow{
					processors: p, authz: a, workers: sp.workers,
					submit: newScaleFigure(cfg.scaleN, r.submitRate, r.submitCPU, r.submitDur.Seconds()),
					drain:  newScaleFigure(cfg.scaleN, r.drainRate, r.drainCPU, r.drainDur.Seconds()),
					others: m.others(),
				}
				logf("scaling %d processor(s), %d authz, %d worker(s) %d/%d: submit %.0f batches/s (%.2f CPU-s/1k, %.2f cores), drain %.0f batches/s (%.2f CPU-s/1k, %.2f cores)",
					p, a, sp.workers, i+1, cfg.scaleReps, row.submit.rate, row.submit.cpuPer1k, row.submit.cores, row.drain.rate, row.drain.cpuPer1k, row.drain.cores)
				reps = append(reps, row)
			}
			slices.SortFunc(reps, func(x, y scaleRow) int {
				switch {
				case x.drain.rate < y.drain.rate:
					return -1
				case x.drain.rate > y.drain.rate:
					return 1
				}
				return 0
			})
			rows = append(rows, reps[len(reps)/2])
		}
	}
	return rows, nil
}

// writeScaling prints the scaling phase as a markdown table.
func writeScaling(sb *strings.Builder, cfg *config, rows []scaleRow) {
	fmt.Fprintf(sb, "\nScaling (burn-down of %s atomic no-op batches per combination, %d repetition(s), the median drain kept; one process on %d cores, so \"cores\" is the whole process — servers included — and a figure well under %d with flat throughput is a serial bound, not the CPU):\n\n",
		count(cfg.scaleN), cfg.scaleReps, runtime.NumCPU(), runtime.NumCPU())
	sb.WriteString("| processors | authz | workers | submit batches/s | submit CPU-s per 1k | submit cores | drain batches/s | drain CPU-s per 1k | drain cores | other processes' CPU (cores) |\n")
	sb.WriteString("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		fmt.Fprintf(sb, "| %d | %d | %d | %.0f | %.3f | %.2f | %.0f | %.3f | %.2f | %.2f |\n",
			r.processors, r.authz, r.workers, r.submit.rate, r.submit.cpuPer1k, r.submit.cores, r.drain.rate, r.drain.cpuPer1k, r.drain.cores, r.others)
	}
}

// parseCounts reads a comma-separated list of replica counts, each ≥ 1.
func parseCounts(flagName, s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("-%s %q: expected comma-separated counts ≥ 1, e.g. 1,2,4", flagName, s)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("-%s: expected at least one count, e.g. 1,2,4", flagName)
	}
	return out, nil
}
