package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/ticker"
	"github.com/tickflow/tickflow/worker"
)

// benchDomain is the domain every tickflow scenario runs in.
const benchDomain = "bench"

// Labels of the bench authorization table.
const (
	labelAtomic = "bench_atomic"
	labelSteps  = "bench_steps"
)

// benchTable lets alice submit no-op batches, atomic (high) and non-atomic
// (med), without a concurrency limit: the limit's slot record would be a
// per-label CAS hot spot that measures contention, not the pipeline; with a
// per-key bound above any run's batches, since the keyed burn-down submits
// many batches of one submitter on each key. alice is the one bulk
// submitter, so she may keep every request of -inflight in flight (her
// requests still run on at most three quarters of a replica's workers).
const benchTable = `
callers:
  alice: {max_requests: 1000000}
labels:
  ` + labelAtomic + `:
    domain: ` + benchDomain + `
    users: [alice]
    mode: atomic
    priority: high
    max_per_key: 1000000
    functions:
      noop: {}
  ` + labelSteps + `:
    domain: ` + benchDomain + `
    users: [alice]
    mode: non_atomic
    priority: med
    max_per_key: 1000000
    functions:
      noop: {}
`

// env is one embedded nats-server loaded from the project's nats.conf, on
// its own temporary store, provisioned for the bench domain, with the
// tickflow components a scenario starts on it.
type env struct {
	cfg *config
	// table is the authorization table authz starts with; "": benchTable.
	table    string
	srv      *embedded.Server   // the server, or the cluster's first node
	nodes    []*embedded.Server // every node of a cluster; nil on one server
	dir      string
	settings streams.Settings
	admin    *nats.Conn
	adminJS  jetstream.JetStream
	// callbacks counts the callbacks the processors published, a group's
	// members each (a group message says how many in its Count header):
	// CALLBACKS's sequence counts messages, not batches.
	callbacks atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  []*nats.Conn
	mu     sync.Mutex
	errs   []error

	authzConns  []*nats.Conn
	workerConns []*nats.Conn
	procs       []*processor.Processor
	procConns   []*nats.Conn
	tickCancel  context.CancelFunc
	tickWG      sync.WaitGroup
	tickStats   tickStats
}

type tickStats struct {
	mu      sync.Mutex
	ticks   int
	idle    int
	errors  int
	lastErr string
	steps   int
	busy    time.Duration // time spent in ticks that ran steps
}

// startEnv starts a fresh server. listen makes it accept TCP connections on
// a random loopback port too (for a child process).
func startEnv(cfg *config, listen bool) (*env, error) {
	dir, err := os.MkdirTemp(cfg.tmpDir, "tickflow-bench-")
	if err != nil {
		return nil, err
	}
	eo := embedded.Options{ConfigFile: cfg.natsConf, DataDir: filepath.Join(dir, "jetstream"), DontListen: !listen}
	if listen {
		eo.Listen = "127.0.0.1:0"
	}
	srv, err := embedded.Start(eo)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	settings := streams.DefaultSettings()
	if cfg.finishedAge > 0 {
		settings.FinishedMaxAge = cfg.finishedAge
	}
	return newEnv(cfg, dir, srv, nil, settings)
}

// newEnv wraps running servers: it connects as admin and provisions the
// bench domain with settings (storage per -memory). On error it closes
// everything, servers included.
func newEnv(cfg *config, dir string, srv *embedded.Server, nodes []*embedded.Server, settings streams.Settings) (*env, error) {
	ctx, cancel := context.WithCancel(context.Background())
	e := &env{cfg: cfg, srv: srv, nodes: nodes, dir: dir, settings: settings, ctx: ctx, cancel: cancel}
	e.settings.Memory = cfg.memory
	var err error
	if e.admin, err = e.connect("admin"); err != nil {
		e.close()
		return nil, err
	}
	if e.adminJS, err = jetstream.New(e.admin); err != nil {
		e.close()
		return nil, err
	}
	if _, err := countCallbacks(e.admin, &e.callbacks); err != nil {
		e.close()
		return nil, err
	}
	pctx, pcancel := context.WithTimeout(ctx, 60*time.Second)
	defer pcancel()
	if err := streams.Provision(pctx, e.adminJS, e.settings, benchDomain); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

// connect opens a connection as a nats.conf user, with its local-default
// password, the way internal/system wires the roles: in-process on one
// server, over TCP loopback to the role's node on a cluster (nodeOf).
func (e *env) connect(user string, extra ...nats.Option) (*nats.Conn, error) {
	cr := streams.Credentials{User: user, Password: "local-" + user, Name: "bench-" + user}
	var opts []nats.Option
	if len(e.nodes) > 0 {
		cr.URL = e.nodes[nodeOf(user)%len(e.nodes)].ClientURL()
	} else {
		opts = append(opts, e.srv.InProcess())
	}
	opts = append(opts, extra...)
	var nc *nats.Conn
	var err error
	// The connection's goroutines, the client's and the server's alike,
	// inherit the role label, so a CPU profile splits by role (-tags).
	withRole(user, func() { nc, err = streams.Connect(cr, opts...) })
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.conns = append(e.conns, nc)
	e.mu.Unlock()
	return nc, nil
}

// withRole runs f with the pprof label role=<role>; goroutines f starts
// inherit it.
func withRole(role string, f func()) {
	pprof.Do(context.Background(), pprof.Labels("role", role), func(context.Context) { f() })
}

func (e *env) fail(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
}

// err returns the first error a background component reported.
func (e *env) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}

// startAuthz runs n authz replicas, each on its own connection; they share
// the micro service's queue group and the callbacks consumer.
func (e *env) startAuthz(n int) error {
	src := benchTable
	if e.table != "" {
		src = e.table
	}
	table, err := authz.ParseTable([]byte(src))
	if err != nil {
		return err
	}
	for range n {
		nc, err := e.connect("authz")
		if err != nil {
			return err
		}
		svc, err := authz.New(e.ctx, nc, authz.Options{Table: table})
		if err != nil {
			return err
		}
		e.authzConns = append(e.authzConns, nc)
		withRole("authz", func() {
			e.wg.Go(func() {
				if err := svc.Run(e.ctx); err != nil {
					e.fail(fmt.Errorf("authz: %w", err))
				}
			})
		})
	}
	return e.waitService("authz", n)
}

// startWorkers runs k workers serving the no-op handler, each on its own
// connection with the given concurrency; they share the work service's
// queue group.
func (e *env) startWorkers(k, concurrency int) error {
	for i := range k {
		mux := pipeline.NewServeMux()
		mux.RegisterFunc("noop", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
			return pipeline.Result{}, nil
		})
		nc, err := e.connect("worker")
		if err != nil {
			return err
		}
		w, err := worker.New(e.ctx, nc, mux, worker.Options{Name: fmt.Sprintf("bench-worker-%d", i+1), Concurrency: concurrency})
		if err != nil {
			return err
		}
		e.workerConns = append(e.workerConns, nc)
		withRole("worker", func() {
			e.wg.Go(func() {
				if err := w.Run(e.ctx); err != nil {
					e.fail(fmt.Errorf("worker: %w", err))
				}
			})
		})
	}
	return e.waitService("worker", k)
}

// nodeOf is the cluster node a role connects to: authz (and the callers
// and the bench's admin) to the first, workers to the second, processors
// and the ticker to the third, so every hand-off between roles crosses a
// route.
func nodeOf(user string) int {
	switch user {
	case "worker":
		return 1
	case "processor", "ticker":
		return 2
	}
	return 0
}

// waitService waits until n instances of a micro service answer a ping.
func (e *env) waitService(name string, n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		inbox := nats.NewInbox()
		sub, err := e.admin.SubscribeSync(inbox)
		if err != nil {
			return err
		}
		if err := e.admin.PublishRequest("$SRV.PING."+name, inbox, nil); err != nil {
			_ = sub.Unsubscribe()
			return err
		}
		got := 0
		for got < n {
			if _, err := sub.NextMsg(100 * time.Millisecond); err != nil {
				break
			}
			got++
		}
		_ = sub.Unsubscribe()
		if got >= n {
			return nil
		}
		if err := e.err(); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s: %d instance(s) did not answer within 10s", name, n)
}

// newProcessors binds n processor replicas of the bench domain, each on its
// own connection with the options o (its domain and name set here),
// without ticking them.
func (e *env) newProcessors(n int, o processor.Options) error {
	for i := range n {
		nc, err := e.connect("processor")
		if err != nil {
			return err
		}
		o.Domain, o.Name = benchDomain, fmt.Sprintf("bench-proc-%d", i+1)
		p, err := processor.New(e.ctx, nc, o)
		if err != nil {
			return err
		}
		e.procs = append(e.procs, p)
		e.procConns = append(e.procConns, nc)
	}
	return nil
}

// startTicking drives every processor as fast as ticks allow: each replica
// gets the next tick as soon as its previous tick's report is back, asking
// for steps steps (the ticker's request/reply loop without the transport).
// A tick that found no messages is followed by a wait for work of at most
// -idle-wait (Processor.WaitWork), or, with -idle-wait 0, a pause of idle.
func (e *env) startTicking(steps int, idle time.Duration) {
	wait := e.cfg.idleWait
	ctx, cancel := context.WithCancel(e.ctx)
	e.tickCancel = cancel
	for _, p := range e.procs {
		withRole("processor", func() {
			e.tickWG.Go(func() {
				for ctx.Err() == nil {
					t0 := time.Now()
					rep := p.Tick(ctx, steps)
					dt := time.Since(t0)
					e.tickStats.mu.Lock()
					e.tickStats.ticks++
					if len(rep.Steps) > 0 {
						e.tickStats.steps += len(rep.Steps)
						e.tickStats.busy += dt
					}
					switch rep.Status {
					case api.TickNoMessages:
						e.tickStats.idle++
					case api.TickError:
						e.tickStats.errors++
						e.tickStats.lastErr = rep.Error
					}
					for _, s := range rep.Steps {
						if s.Action == api.ActionError {
							e.tickStats.errors++
							e.tickStats.lastErr = s.Error
						}
					}
					e.tickStats.mu.Unlock()
					if rep.Status == api.TickNoMessages {
						if wait > 0 {
							if err := p.WaitWork(ctx, wait); err != nil && ctx.Err() == nil {
								e.fail(err)
								return
							}
						} else if idle > 0 {
							time.Sleep(idle)
						} else {
							runtime.Gosched()
						}
					}
				}
			})
		})
	}
}

// startTicker drives the processors the way `tickflow run` does: each
// runs (processor.Run) in its pace, serving ticks on the domain's tick
// subject (one queue group, so a tick reaches one replica) and, in the ready
// pace, taking ready work itself; a real ticker on its own connection
// publishes a tick asking for steps steps every interval.
func (e *env) startTicker(every time.Duration, steps int) error {
	nc, err := e.connect("ticker")
	if err != nil {
		return err
	}
	tk, err := ticker.New(nc, ticker.Options{Domains: []string{benchDomain}, Every: every, Steps: steps})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(e.ctx)
	e.tickCancel = cancel
	for _, p := range e.procs {
		withRole("processor", func() {
			e.tickWG.Go(func() {
				if err := p.Run(ctx); err != nil {
					e.fail(fmt.Errorf("processor: %w", err))
				}
			})
		})
	}
	withRole("ticker", func() {
		e.tickWG.Go(func() {
			if err := tk.Run(ctx); err != nil {
				e.fail(fmt.Errorf("ticker: %w", err))
			}
		})
	})
	return nil
}

func (e *env) stopTicking() {
	if e.tickCancel != nil {
		e.tickCancel()
		e.tickWG.Wait()
		e.tickCancel = nil
	}
}

// callbackProgress returns how many callbacks the processors have published
// and how many of them authz has applied and acknowledged.
func (e *env) callbackProgress(ctx context.Context) (published, applied uint64, err error) {
	c, err := e.adminJS.Consumer(ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
	if err != nil {
		return 0, 0, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	// A message may hold several callbacks (a group): the callbacks seen
	// published are counted as they go by, and those applied are
	// estimated from the share of CALLBACKS's messages acknowledged, exact
	// once every message is.
	published = e.callbacks.Load()
	if info.NumPending == 0 && info.NumAckPending == 0 {
		return published, published, nil
	}
	if msgs := info.Delivered.Stream + info.NumPending; msgs > 0 {
		applied = uint64(float64(published) * float64(info.AckFloor.Stream) / float64(msgs))
	}
	// Not every message is acknowledged yet: not every callback applied.
	return published, min(applied, published-min(published, 1)), nil
}

// waitCallbacks polls until n callbacks are applied by authz and returns
// when the n-th callback was published and when it was applied, measured
// from start. It gives up after timeout without progress.
func (e *env) waitCallbacks(start time.Time, n uint64, timeout time.Duration) (processed, applied time.Duration, err error) {
	last, lastAt := uint64(0), time.Now()
	for {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		pub, app, err := e.callbackProgress(ctx)
		cancel()
		if err != nil {
			return 0, 0, err
		}
		now := time.Now()
		if processed == 0 && pub >= n {
			processed = now.Sub(start)
		}
		if app >= n {
			return processed, now.Sub(start), nil
		}
		if pub+app != last {
			last, lastAt = pub+app, now
		} else if now.Sub(lastAt) > timeout {
			e.tickStats.mu.Lock()
			ticks, idle, errs, lastErr := e.tickStats.ticks, e.tickStats.idle, e.tickStats.errors, e.tickStats.lastErr
			e.tickStats.mu.Unlock()
			return 0, 0, fmt.Errorf("stalled at %d published, %d applied of %d callbacks (ticks %d, idle %d, errors %d, last error %q)",
				pub, app, n, ticks, idle, errs, lastErr)
		}
		if err := e.err(); err != nil {
			return 0, 0, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// close stops every component, drains the connections, shuts the server
// down and removes its store.
func (e *env) close() {
	e.stopTicking()
	e.cancel()
	e.wg.Wait()
	e.mu.Lock()
	conns := e.conns
	e.conns = nil
	e.mu.Unlock()
	for i := len(conns) - 1; i >= 0; i-- {
		conns[i].Close()
	}
	if len(e.nodes) == 0 {
		e.srv.Close()
	}
	for _, s := range e.nodes {
		s.Close()
	}
	_ = os.RemoveAll(e.dir)
}
