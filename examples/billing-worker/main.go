// Command billing-worker is a worker of your own: it executes the billing
// functions of tickflow batches. It takes the same flags, `worker:` section
// of the config file and TICKFLOW_WORKER_* / NATS_* variables as bin/worker.
//
//	go build -o bin/billing-worker ./examples/billing-worker
//	NATS_USER=worker NATS_PASSWORD=local-worker bin/billing-worker
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// Charge is the payload of billing.charge.
type Charge struct {
	Customer string `msgpack:"customer"`
	Cents    int64  `msgpack:"cents"`
}

// charge runs billing.charge. Returning an error retries the function under
// its retry logic; pipeline.Permanent(err) gives up at once.
func charge(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var c Charge
	if err := call.Payload.Decode(&c); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	if c.Cents <= 0 {
		return pipeline.Result{}, pipeline.Permanent(errors.New("billing: cents must be > 0"))
	}
	// The payload says what was asked for; call.Submitter says who asked, as
	// authz learnt it from the connection. Customers charge only themselves.
	if c.Customer != call.Submitter {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("billing: %q may not charge customer %q", call.Submitter, c.Customer))
	}
	// Pass call.IdempotencyKey() to the payment provider: it is the same on
	// every attempt of this call, so a repeated call charges once.
	return pipeline.Result{Data: pipeline.MustPayload(map[string]any{"charged": c.Cents, "key": call.IdempotencyKey()})}, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "billing-worker:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := config.DefaultWorker()
	if err := config.Parse(flag.CommandLine, os.Args[1:], &cfg, os.Getenv); err != nil {
		return err
	}
	log, err := cfg.Log.Logger(os.Stderr)
	if err != nil {
		return err
	}

	mux := pipeline.NewServeMux()
	mux.RegisterFunc("billing.charge", charge) // or mux.Register("billing.charge", myHandler) for a pipeline.Handler

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// As the role "worker": its inbox, logged connection events, drain on close.
	nc, err := conn.Dial(cfg.NATS, "worker", log)
	if err != nil {
		return err
	}
	defer nc.Close() // flushes the last replies

	w, err := worker.New(ctx, nc.Conn, mux, worker.Options{Name: cfg.Name, Concurrency: cfg.Concurrency, Logger: log})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
