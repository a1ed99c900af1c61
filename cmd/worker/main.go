// Command worker executes functions for the processors: it serves the
// handlers of a pipeline.ServeMux as the NATS micro service "worker"
// in the queue group "workers", so workers scale out by starting more.
//
//	NATS_USER=worker NATS_PASSWORD=local-worker worker
//
// Flags, the config file's worker: section and TICKFLOW_WORKER_* variables
// configure it (see config.Worker; -h lists them all). This binary serves
// only the example handlers (-examples, on by default: a ledger with demo
// balances, http.post, flaky, fail and noop), which make the demo meaningful.
// A real deployment builds its own worker binary around its own handlers, a
// main like this one:
//
//	mux := pipeline.NewServeMux()
//	mux.Register("billing.charge", myHandler) // a pipeline.Handler
//	mux.RegisterFunc("billing.refund", refund) // or a plain function
//	w, err := worker.New(ctx, nc, mux, worker.Options{Name: cfg.Name, Concurrency: cfg.Concurrency, Logger: log})
//	if err != nil {
//		return err
//	}
//	return w.Run(ctx)
//
// (docs/operations.md has the whole file). SIGINT or SIGTERM stops taking
// calls, lets the calls in flight finish and answer, drains the connection
// and exits 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
	"github.com/tickflow/tickflow/worker"
)

// role is the nats.conf user whose permissions this command needs.
const role = "worker"

func main() {
	if err := run(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := config.DefaultWorker()
	flag.CommandLine.Usage = usage(&cfg)
	if err := config.Parse(flag.CommandLine, os.Args[1:], &cfg, os.Getenv); err != nil {
		return err
	}
	log, err := cfg.Log.Logger(os.Stderr)
	if err != nil {
		return err
	}

	mux := pipeline.NewServeMux()
	if cfg.Examples {
		handlers.Register(mux, handlers.NewLedger(map[string]int64{"alice": 1000, "bob": 500}))
	}
	if len(mux.Types()) == 0 {
		return errors.New("no handlers are registered: the example handlers are off (worker.examples is false) and this binary has no others; " +
			"a real deployment builds its own worker binary that registers its handlers (docs/operations.md, \"Your own worker\")")
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

	w, err := worker.New(ctx, nc, mux, worker.Options{
		Name:        cfg.Name,
		Concurrency: cfg.Concurrency,
		Logger:      log,
	})
	if err != nil {
		return err
	}
	if err := w.Run(ctx); err != nil {
		return err
	}
	log.Info("worker stopped", "name", cfg.Name)
	return nil
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

// drain flushes what the connection still has to send (the last replies)
// and closes it, waiting until it is closed.
func drain(nc *nats.Conn, closed <-chan struct{}, log *slog.Logger) {
	if err := nc.Drain(); err != nil {
		log.Warn("nats drain", "err", err)
		nc.Close()
	}
	<-closed
}

// usage prints the flags and the environment variables cfg reads.
func usage(cfg *config.Worker) func() {
	return func() {
		out := flag.CommandLine.Output()
		fmt.Fprintf(out, "Usage: worker [flags]\n\nExecutes functions for the processors: serves the example handlers (-examples).\nA real deployment builds its own worker binary; see docs/operations.md.\n\nFlags:\n")
		flag.PrintDefaults()
		fmt.Fprintf(out, "\nEnvironment (flags win over it, it wins over the config file):\n  TICKFLOW_CONFIG  -config\n")
		for _, v := range config.EnvVars(cfg) {
			fmt.Fprintln(out, " ", v)
		}
	}
}
