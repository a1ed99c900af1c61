// Package local runs a whole tickflow in this process, on an embedded
// nats-server: authz with your authorization table, a processor for every
// domain the table names, and a worker serving your handlers. It is for
// trying tickflow out, for examples, and for your own end-to-end tests of
// handlers; a deployment runs the same parts as separate processes (see the
// operations guide).
//
// Every part connects as its own user of tickflow.NATSConfig, with the
// permissions a deployment gives it, and the server listens on no port:
// System.Client connects callers in-process.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// Options say what to run. Table and Mux are required.
type Options struct {
	// Table is the authorization table, in the YAML a table file holds
	// (authz.ParseTable): who may submit which batches to which domain.
	Table []byte
	// Mux holds the handlers the worker serves.
	Mux *pipeline.ServeMux
	// Pace, optional, is the processors' pace: processor.PaceReady (the
	// default) takes work as it becomes ready; with processor.PaceTick a
	// batch runs only when System.Tick is called.
	Pace processor.Pace
	// Dir, optional, is the JetStream store directory. Default: a
	// temporary directory, removed by Close.
	Dir string
	// Logger, optional, receives every part's logs. Default: none.
	Logger *slog.Logger
}

// System is a running tickflow. Close stops it.
type System struct {
	srv        *embedded.Server
	dir        string // removed by Close when Start made it
	conns      []*nats.Conn
	processors map[string]*processor.Processor
	cancel     context.CancelFunc
	done       chan error
	runs       int
	closed     bool
}

// Start provisions the streams and buckets of the table's domains and runs
// authz, a processor per domain and a worker until Close. It returns once
// every part was built; authz answers callers a moment later, and a
// client's request that finds it not yet running fails with
// client.ErrNotRunning, which is safe to retry.
func Start(ctx context.Context, o Options) (*System, error) {
	if o.Mux == nil {
		return nil, errors.New("local: Options.Mux is required: the handlers the worker serves")
	}
	table, err := authz.ParseTable(o.Table)
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &System{processors: map[string]*processor.Processor{}}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "tickflow-local-"); err != nil {
			return nil, fmt.Errorf("local: %w", err)
		}
		s.dir = dir
	}
	s.srv, err = embedded.Start(embedded.Options{Config: tickflow.NATSConfig, DataDir: dir, DontListen: true})
	if err != nil {
		s.cleanup()
		return nil, fmt.Errorf("local: %w", err)
	}
	if err := s.start(ctx, table, o, log); err != nil {
		s.cleanup()
		return nil, fmt.Errorf("local: %w", err)
	}
	return s, nil
}

// start provisions and builds every part, then runs them.
func (s *System) start(ctx context.Context, table *authz.Table, o Options, log *slog.Logger) error {
	domains := map[string]bool{}
	for _, l := range table.Labels {
		domains[l.Domain] = true
	}
	names := slices.Sorted(maps.Keys(domains))
	admin, err := s.connect("admin")
	if err != nil {
		return err
	}
	js, err := jetstream.New(admin)
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, js, streams.DefaultSettings(), names...); err != nil {
		return err
	}
	var runs []func(context.Context) error
	ac, err := s.connect("authz")
	if err != nil {
		return err
	}
	az, err := authz.New(ctx, ac, authz.Options{Table: table, Logger: log})
	if err != nil {
		return err
	}
	runs = append(runs, az.Run)
	wc, err := s.connect("worker")
	if err != nil {
		return err
	}
	w, err := worker.New(ctx, wc, o.Mux, worker.Options{Logger: log})
	if err != nil {
		return err
	}
	runs = append(runs, w.Run)
	pc, err := s.connect("processor")
	if err != nil {
		return err
	}
	for _, d := range names {
		p, err := processor.New(ctx, pc, processor.Options{Domain: d, Logger: log, Pace: o.Pace})
		if err != nil {
			return err
		}
		s.processors[d] = p
		runs = append(runs, p.Run)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel, s.done, s.runs = cancel, make(chan error, len(runs)), len(runs)
	for _, run := range runs {
		go func() { s.done <- run(rctx) }()
	}
	return nil
}

// connect connects in-process as user, with the local password.
func (s *System) connect(user string) (*nats.Conn, error) {
	nc, err := streams.Connect(streams.Credentials{User: user, Password: "local-" + user, Name: "local-" + user}, s.srv.InProcess())
	if err != nil {
		return nil, err
	}
	s.conns = append(s.conns, nc)
	return nc, nil
}

// Client connects a caller: user is one of tickflow.NATSConfig's users
// (alice, bob, oracle, owner, ...). Close closes its connection.
func (s *System) Client(user string, cfg client.Config) (*client.Client, error) {
	nc, err := s.connect(user)
	if err != nil {
		return nil, fmt.Errorf("local: connect as %s: %w", user, err)
	}
	return client.New(nc, user, cfg)
}

// Tick asks the domain's processor for up to steps steps now, as a tick
// from a ticker would; with processor.PaceTick nothing runs without one.
// It returns what the tick did.
func (s *System) Tick(ctx context.Context, domain string, steps int) (api.TickReport, error) {
	p, ok := s.processors[domain]
	if !ok {
		return api.TickReport{}, fmt.Errorf("local: no processor for domain %q: the table names %v", domain, slices.Sorted(maps.Keys(s.processors)))
	}
	return p.Tick(ctx, steps), nil
}

// Close stops every part, waits for them, closes the connections and the
// server, and removes the store directory if Start made it. Closing again
// does nothing.
func (s *System) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.cancel != nil {
		s.cancel()
		for range s.runs {
			if err := <-s.done; err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		}
	}
	s.cleanup()
	return errors.Join(errs...)
}

// cleanup closes the connections and the server and removes a store
// directory Start made.
func (s *System) cleanup() {
	for i := len(s.conns) - 1; i >= 0; i-- {
		s.conns[i].Close()
	}
	if s.srv != nil {
		s.srv.Close()
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir) // a temporary directory of our own
	}
}
