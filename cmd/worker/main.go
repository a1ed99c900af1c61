// Command worker executes functions for the processors: it serves the
// handlers of a pipeline.ServeMux as the NATS micro service "worker"
// in the queue group "workers", so workers scale out by starting more.
//
//	NATS_USER=worker NATS_PASSWORD=local-worker worker
//
// Flags, the config file's worker: section and TICKFLOW_WORKER_* variables
// configure it (see config.Worker; -h lists them all). This binary has no
// handlers of its own: with -examples (off by default) it serves the example
// handlers (a ledger with demo balances, http.post, flaky, fail and noop, and
// the underwriting step pipeline), which make the demo meaningful.
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
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/examples/demo"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/worker"
)

// role is the nats.conf user whose permissions the worker needs.
const role = "worker"

func main() { cli.Main("worker", run) }

func run() error {
	cfg := config.DefaultWorker()
	metricsListen := cli.MetricsFlag("")
	log, err := cli.Load("Usage: worker [flags]\n\nExecutes functions for the processors: serves the example handlers when asked to (-examples).\nA real deployment builds its own worker binary; see docs/operations.md.", &cfg, &cfg.Log)
	if err != nil {
		return err
	}

	if !cfg.Examples {
		return errors.New("no handlers are registered: this binary has none of its own, and the example handlers are opt-in (-examples, worker.examples, TICKFLOW_WORKER_EXAMPLES=true); " +
			"a real deployment builds its own worker binary that registers its handlers (docs/operations.md, \"Your own worker\")")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := cli.Connect(cfg.NATS, cfg.Embedded, role, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The example handlers and the underwriting step pipeline, as make run serves them.
	mux, err := demo.Mux(ctx, nc.Conn, log)
	if err != nil {
		return err
	}

	obs, err := cli.StartTelemetry(ctx, "worker", *metricsListen, log)
	if err != nil {
		return err
	}
	defer obs.Close()
	o := options(cfg, log)
	o.Telemetry = obs.Telemetry
	w, err := worker.New(ctx, nc.Conn, mux, o)
	if err != nil {
		return err
	}
	if err := w.Run(ctx); err != nil {
		return err
	}
	log.Info("worker stopped", "name", cfg.Name)
	return nil
}

// options are the worker.Options under cfg.
func options(cfg config.Worker, log *slog.Logger) worker.Options {
	return worker.Options{
		Senders:      cfg.SenderSecrets(),
		Name:         cfg.Name,
		Concurrency:  cfg.Concurrency,
		RecordWindow: cfg.RecordWindow,
		Logger:       log,
	}
}
