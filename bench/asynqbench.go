package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// redisServer is the path the harness expects Debian's redis-server at.
const redisServer = "/usr/bin/redis-server"

// errNoRedis says how to get redis-server.
var errNoRedis = errors.New("asynq: " + redisServer + " is missing: `apt-get install -y redis-server` is needed (make bench installs it)")

// redisProc is a redis-server the harness started.
type redisProc struct {
	cmd  *exec.Cmd
	dir  string
	addr string
}

// startRedis starts redis-server on a free loopback port, in its own temp
// dir, with its default persistence (RDB snapshots at the built-in save
// points, no AOF), and waits until it answers PING.
func startRedis(cfg *config) (*redisProc, error) {
	if _, err := os.Stat(redisServer); err != nil {
		return nil, errNoRedis
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	dir, err := os.MkdirTemp(cfg.tmpDir, "tickflow-bench-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(redisServer, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no")
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	r := &redisProc{cmd: cmd, dir: dir, addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
	rc := redis.NewClient(&redis.Options{Addr: r.addr})
	defer rc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rc.Ping(ctx).Err()
		cancel()
		if err == nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("asynq: redis-server on %s did not answer: %w (log in %s)", r.addr, err, dir)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop terminates the redis-server this harness started (by its pid) and
// removes its directory.
func (r *redisProc) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	_ = os.RemoveAll(r.dir)
}

// asynqResult is one run of asynq: its rates, and the CPU-seconds used
// while enqueuing and while draining by this process (asynq's client and
// server) and redis-server together.
type asynqResult struct {
	enqRate, drainRate float64
	enqCPU, drainCPU   float64
}

// runAsynq enqueues n no-op tasks with `inflight` enqueuers, then starts an
// asynq server with the given concurrency and measures until the queue has
// no pending and no active task left.
func runAsynq(cfg *config, n, concurrency int) (asynqResult, error) {
	var res asynqResult
	r, err := startRedis(cfg)
	if err != nil {
		return res, err
	}
	defer r.stop()
	opt := asynq.RedisClientOpt{Addr: r.addr, PoolSize: max(cfg.inflight, 10)}
	client := asynq.NewClient(opt)
	defer client.Close()
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	cpu := func() float64 { return selfBusy() + pidBusy(r.cmd.Process.Pid) }
	cpu0 := cpu()
	start := time.Now()
	for range min(cfg.inflight, n) {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if _, err := client.Enqueue(asynq.NewTask("noop", nil), asynq.MaxRetry(0)); err != nil {
					once.Do(func() { firstErr = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return res, fmt.Errorf("asynq: enqueue: %w", firstErr)
	}
	tenq := time.Since(start)
	cpu1 := cpu()

	insp := asynq.NewInspector(opt)
	defer insp.Close()
	var handled atomic.Int64
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: concurrency,
		Queues:      map[string]int{"default": 1},
		LogLevel:    asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		handled.Add(1)
		return nil
	})
	start = time.Now()
	if err := srv.Start(mux); err != nil {
		return res, fmt.Errorf("asynq: start server: %w", err)
	}
	defer srv.Shutdown()
	deadline := time.Now().Add(cfg.stall)
	last := int64(0)
	for {
		h := handled.Load()
		if h >= int64(n) {
			qi, err := insp.GetQueueInfo("default")
			if err != nil {
				return res, err
			}
			if qi.Pending == 0 && qi.Active == 0 {
				break
			}
		}
		if h != last {
			last, deadline = h, time.Now().Add(cfg.stall)
		} else if time.Now().After(deadline) {
			return res, fmt.Errorf("asynq: stalled at %d of %d tasks", h, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
	tdrain := time.Since(start)
	res.enqCPU, res.drainCPU = cpu1-cpu0, cpu()-cpu1
	res.enqRate, res.drainRate = float64(n)/tenq.Seconds(), float64(n)/tdrain.Seconds()
	return res, nil
}
