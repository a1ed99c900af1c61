package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// childCommand is the subcommand the bench re-executes itself with to run
// a processor in a process of its own.
const childCommand = "child-processor"

// childReport is what the child processor prints once its ticks are done.
type childReport struct {
	Ticks     int     `json:"ticks"`
	MeanUS    float64 `json:"mean_us"`
	P50US     float64 `json:"p50_us"`
	P99US     float64 `json:"p99_us"`
	HeapInuse uint64  `json:"heap_inuse"`
	GoSys     uint64  `json:"go_sys"`
	Error     string  `json:"error,omitempty"`
}

// depthResult is one child run at one queue depth.
type depthResult struct {
	childReport
	rssKB, hwmKB int
}

// fill writes batch records and tokens for ids [from, to] the way authz
// would, pipelined: an async put of each record to $KV.batches.<id>, then
// its token, as the authz user. Returns the rate in batches/s.
func fill(e *env, from, to uint64) (float64, error) {
	nc, err := e.connect("authz")
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	var pubErrs atomic.Int64
	var lastErr atomic.Value
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			pubErrs.Add(1)
			lastErr.Store(err.Error())
		}))
	if err != nil {
		return 0, err
	}
	now := time.Now().UTC()
	start := time.Now()
	for id := from; id <= to; id++ {
		b := pipeline.Batch{
			ID: id, Domain: benchDomain, Label: labelAtomic, Submitter: "alice", Priority: pipeline.High,
			Functions: []pipeline.Function{{Type: "noop"}}, Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic},
			CreatedAt: now,
		}
		rec := records.BatchRecord{Batch: b, Status: pipeline.InProcess, CreatedAt: now, UpdatedAt: now,
			History: []records.Event{{At: now, What: "accepted", Detail: "high queue of " + benchDomain}}}
		data, err := records.Encode(&rec)
		if err != nil {
			return 0, err
		}
		m := nats.NewMsg("$KV." + streams.BucketBatches + "." + streams.BatchKey(id))
		m.Data = data
		if _, err := js.PublishMsgAsync(m); err != nil {
			return 0, err
		}
		tm, err := streams.TokenMsg(streams.TokenSubject(b.Priority, b.Domain), &b, 0, 0)
		if err != nil {
			return 0, err
		}
		if _, err := js.PublishMsgAsync(tm); err != nil {
			return 0, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(5 * time.Minute):
		return 0, errors.New("fill: publishes not acknowledged within 5m")
	}
	if k := pubErrs.Load(); k > 0 {
		return 0, fmt.Errorf("fill: %d publishes failed, last: %v", k, lastErr.Load())
	}
	return float64(to-from+1) / time.Since(start).Seconds(), nil
}

// queued returns the tokens in HIGH.
func queued(e *env) (uint64, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	s, err := e.adminJS.Stream(ctx, streams.StreamHigh)
	if err != nil {
		return 0, err
	}
	return streamMsgs(ctx, s)
}

// runChild runs a processor in a child process (the bench binary
// re-executed) over TCP loopback, which times ticks of one step each, then
// reads the child's VmRSS and VmHWM from /proc while it waits.
func runChild(cfg *config, url string) (*depthResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, childCommand, "-url", url, "-ticks", strconv.Itoa(cfg.depthTicks), "-warmup", strconv.Itoa(cfg.depthWarmup))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		_ = stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("child processor: %w", err)
	}
	var r depthResult
	if err := json.Unmarshal([]byte(line), &r.childReport); err != nil {
		return nil, fmt.Errorf("child processor said %q: %w", line, err)
	}
	if r.Error != "" {
		return nil, fmt.Errorf("child processor: %s", r.Error)
	}
	r.rssKB, r.hwmKB, err = procStatus(cmd.Process.Pid)
	return &r, err
}

// procStatus reads VmRSS and VmHWM (kB) of a process.
func procStatus(pid int) (rss, hwm int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "VmRSS:":
			rss, _ = strconv.Atoi(f[1])
		case "VmHWM:":
			hwm, _ = strconv.Atoi(f[1])
		}
	}
	return rss, hwm, nil
}

// childMain is the child processor: it connects as the processor user,
// ticks warmup times, then times ticks ticks of one step each, prints a
// childReport line and waits for its stdin to close.
func childMain(args []string) int {
	fs := flag.NewFlagSet(childCommand, flag.ExitOnError)
	url := fs.String("url", "", "server URL")
	ticks := fs.Int("ticks", 300, "timed ticks")
	warmup := fs.Int("warmup", 30, "untimed ticks first")
	_ = fs.Parse(args)
	rep := childRun(*url, *ticks, *warmup)
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	_, _ = io.Copy(io.Discard, os.Stdin)
	if rep.Error != "" {
		return 1
	}
	return 0
}

func childRun(url string, ticks, warmup int) childReport {
	var rep childReport
	nc, err := streams.Connect(streams.Credentials{URL: url, User: "processor", Password: "local-processor", Name: "bench-child-processor"})
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	defer nc.Close()
	ctx := context.Background()
	p, err := processor.New(ctx, nc, processor.Options{Domain: benchDomain, Name: "bench-child", Concurrency: 1, MaxSteps: 1})
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	tick := func() (time.Duration, error) {
		t0 := time.Now()
		r := p.Tick(ctx, 1)
		dt := time.Since(t0)
		if r.Status != api.TickOK || len(r.Steps) != 1 || r.Steps[0].Action != api.ActionFinished {
			return dt, fmt.Errorf("tick did not finish one batch: %+v", r)
		}
		return dt, nil
	}
	for range warmup {
		if _, err := tick(); err != nil {
			rep.Error = err.Error()
			return rep
		}
	}
	ds := make([]time.Duration, 0, ticks)
	var sum time.Duration
	for range ticks {
		d, err := tick()
		if err != nil {
			rep.Error = err.Error()
			return rep
		}
		ds = append(ds, d)
		sum += d
	}
	slices.Sort(ds)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep.Ticks = ticks
	rep.MeanUS = float64(sum.Microseconds()) / float64(ticks)
	rep.P50US = float64(percentile(ds, 50).Microseconds())
	rep.P99US = float64(percentile(ds, 99).Microseconds())
	rep.HeapInuse, rep.GoSys = ms.HeapInuse, ms.Sys
	return rep
}

// depthOutcome is the whole depth scenario.
type depthOutcome struct {
	small, large uint64 // tokens queued when the timed ticks began (at least)
	smallRuns    []*depthResult
	largeRuns    []*depthResult
	fillRate     float64
	storeMB      float64
	serverRSSKB  int
}

// runDepth measures the cost of a one-step tick and the processor's RSS
// with a small and a large queue, on one server that listens on loopback
// for the child processor. The queue holds at least `small` (then `large`)
// tokens throughout the timed ticks.
func runDepth(cfg *config) (*depthOutcome, error) {
	need := uint64(cfg.depthLarge) * 1200 // bytes, generously: record + token + indexes
	if free, err := freeBytes(cfg.tmpDir); err == nil && free < need+2<<30 {
		return nil, fmt.Errorf("depth: %s has %d MiB free, need about %d MiB", cfg.tmpDir, free>>20, (need+2<<30)>>20)
	}
	e, err := startEnv(cfg, true)
	if err != nil {
		return nil, err
	}
	defer e.close()
	if err := e.startWorkers(1, cfg.workerConcurrency()); err != nil {
		return nil, err
	}
	out := &depthOutcome{small: uint64(cfg.depthSmall), large: uint64(cfg.depthLarge)}
	perRun := uint64(cfg.depthTicks + cfg.depthWarmup)
	extra := perRun * uint64(cfg.reps)
	next := uint64(1)
	top := uint64(cfg.depthSmall) + extra
	if _, err := fill(e, next, top); err != nil {
		return nil, err
	}
	next = top + 1
	for r := range cfg.reps {
		res, err := runChild(cfg, e.srv.ClientURL())
		if err != nil {
			return nil, fmt.Errorf("depth %d, run %d: %w", cfg.depthSmall, r+1, err)
		}
		out.smallRuns = append(out.smallRuns, res)
		logf("  depth %d run %d: %.0f µs/tick (p50 %.0f), child VmRSS %d MiB", cfg.depthSmall, r+1, res.MeanUS, res.P50US, res.rssKB>>10)
	}
	have, err := queued(e)
	if err != nil {
		return nil, err
	}
	top = next + uint64(cfg.depthLarge) - have + extra - 1
	logf("  filling the queue to %d tokens (%d records and tokens)…", uint64(cfg.depthLarge)+extra, top-next+1)
	rate, err := fill(e, next, top)
	if err != nil {
		return nil, err
	}
	out.fillRate = rate
	if have, err = queued(e); err != nil {
		return nil, err
	}
	logf("  filled at %.0f batches/s; HIGH holds %d tokens", rate, have)
	if cfg.profilePhase == "depth" && cfg.cpuprofile != "" {
		// The server's side of the deep-queue ticks (the child has its own process).
		stop, err := startCPUProfile(cfg.cpuprofile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	for r := range cfg.reps {
		res, err := runChild(cfg, e.srv.ClientURL())
		if err != nil {
			return nil, fmt.Errorf("depth %d, run %d: %w", cfg.depthLarge, r+1, err)
		}
		out.largeRuns = append(out.largeRuns, res)
		logf("  depth %d run %d: %.0f µs/tick (p50 %.0f), child VmRSS %d MiB", cfg.depthLarge, r+1, res.MeanUS, res.P50US, res.rssKB>>10)
	}
	out.storeMB = float64(dirSize(e.dir)) / (1 << 20)
	out.serverRSSKB, _, _ = procStatus(os.Getpid())
	return out, nil
}

func freeBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n += info.Size()
		}
		return nil
	})
	return n
}
