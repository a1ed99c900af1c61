// Command processor serves domains: each tick on tick.<domain> makes it take
// the domain's next executable batches (High before Med) and run one step of
// each through the workers. It serves every domain given, one
// processor.Processor per domain on one connection.
//
//	NATS_USER=processor NATS_PASSWORD=local-processor processor -domain payments,reports
//	NATS_USER=admin NATS_PASSWORD=local-admin processor -domain payments -provision
//
// Flags, the config file's processor: section and TICKFLOW_PROCESSOR_*
// variables configure it (see config.Processor; -h lists them all).
// -provision creates or updates the streams, buckets and the domains'
// consumers first, which only a user allowed to create streams may do (admin
// in nats.conf); without it they must exist already.
//
// Run as many replicas as you like: the replicas of a domain share its
// durable consumer proc-<domain> and the tick queue group, so each tick goes
// to one of them and any of them may die at any moment. SIGINT or SIGTERM
// stops taking ticks, lets the ticks in progress finish, drains the
// connection and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/streams"
)

// role is the nats.conf user whose permissions this command needs.
const role = "processor"

func main() {
	if err := run(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "processor:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := config.DefaultProcessor()
	flag.CommandLine.Usage = usage(&cfg)
	if err := config.Parse(flag.CommandLine, os.Args[1:], &cfg, os.Getenv); err != nil {
		return err
	}
	log, err := cfg.Log.Logger(os.Stderr)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	creds := streams.Credentials{
		URL:      cfg.NATS.ServerURL(),
		User:     cfg.NATS.User,
		Password: cfg.NATS.Password,
		Creds:    cfg.NATS.Creds,
		NKey:     cfg.NATS.NKey,
		Name:     cfg.NATS.Name,
	}
	if creds.User == "" {
		// A user's replies come to _INBOX_<user>. An nkey or creds identity
		// has no user name, so it takes the role's inbox, and the role's
		// permission block in nats.conf can be given to it unchanged.
		creds.InboxPrefix = "_INBOX_" + role
	}
	closed := make(chan struct{})
	nc, err := streams.Connect(creds, connHandlers(log, closed)...)
	if err != nil {
		return err
	}
	defer drain(nc, closed, log)
	log.Info("nats connected", "server", nc.ConnectedUrlRedacted(), "server_name", nc.ConnectedServerName(), "auth", identity(cfg.NATS))

	if cfg.Provision {
		if err := provision(ctx, nc, cfg); err != nil {
			return err
		}
		log.Info("provisioned", "domains", cfg.Domains, "replicas", cfg.Streams.Replicas, "storage", cfg.Streams.Storage)
	}

	procs := make([]*processor.Processor, 0, len(cfg.Domains))
	for _, d := range cfg.Domains {
		p, err := processor.New(ctx, nc, processor.Options{
			Domain:      d,
			Name:        cfg.Name,
			Concurrency: cfg.Concurrency,
			MaxSteps:    cfg.MaxSteps,
			WorkTimeout: cfg.WorkTimeout,
			Logger:      log,
		})
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	log.Info("processor starting", "name", cfg.Name, "domains", cfg.Domains,
		"concurrency", cfg.Concurrency, "max_steps", cfg.MaxSteps, "work_timeout", cfg.WorkTimeout.String())

	g, gctx := withContext(ctx)
	for _, p := range procs {
		g.Go(func() error { return p.Run(gctx) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("processor stopped", "name", cfg.Name)
	return nil
}

// provision creates or updates every stream and bucket and the domains'
// consumers. A user without the right sees its requests time out rather
// than refused, so a timeout says which right may be missing.
func provision(ctx context.Context, nc *nats.Conn, cfg config.Processor) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	err = streams.Provision(ctx, js, cfg.Streams.Settings(), cfg.Domains...)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
		return fmt.Errorf("provision: %w (-provision needs a user allowed to create streams and consumers, e.g. admin; connected as %s)", err, identity(cfg.NATS))
	}
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	return nil
}

// group runs functions and returns the first error, cancelling the context
// of the others when one fails: errgroup.WithContext's contract, kept here
// until go.mod requires golang.org/x/sync.
type group struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
}

func withContext(ctx context.Context) (*group, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &group{cancel: cancel}, ctx
}

// Go runs f on its own goroutine.
func (g *group) Go(f func() error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(); err != nil {
			g.once.Do(func() {
				g.err = err
				g.cancel()
			})
		}
	}()
}

// Wait waits for every function and returns the first error.
func (g *group) Wait() error {
	g.wg.Wait()
	g.cancel()
	return g.err
}

// identity says how n authenticates, without the secret.
func identity(n config.NATS) string {
	switch {
	case n.User != "":
		return "user " + n.User
	case n.Creds != "":
		return "creds " + n.Creds
	case n.NKey != "":
		return "nkey " + n.NKey
	}
	return "anonymous"
}

// connHandlers log what the connection does in the background (a publish
// the server denied arrives only here) and close closed when the connection
// is done. Server addresses are logged redacted: a URL may carry a password.
func connHandlers(log *slog.Logger, closed chan<- struct{}) []nats.Option {
	return []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("nats error", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	}
}

// drain flushes what the connection still has to send (the last acks and
// callbacks) and closes it, waiting until it is closed.
func drain(nc *nats.Conn, closed <-chan struct{}, log *slog.Logger) {
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "err", err)
		nc.Close()
	}
	<-closed
}

// usage prints the flags and the environment variables cfg reads.
func usage(cfg *config.Processor) func() {
	return func() {
		out := flag.CommandLine.Output()
		fmt.Fprintf(out, "Usage: processor -domain DOMAINS [flags]\n\nServes the domains' batches, one step per tick.\n\nFlags:\n")
		flag.PrintDefaults()
		fmt.Fprintf(out, "\nEnvironment (flags win over it, it wins over the config file):\n  TICKFLOW_CONFIG  -config\n")
		for _, v := range config.EnvVars(cfg) {
			fmt.Fprintln(out, " ", v)
		}
	}
}
