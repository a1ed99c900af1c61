// Command chaos-worker is the worker the chaos suite runs: bin/worker's
// example handlers plus chaos.record, which appends every execution to a
// log file in -exec-log and syncs it before returning (see package chaos).
//
//	NATS_USER=worker NATS_PASSWORD=local-worker chaos-worker -exec-log /tmp/exec
//
// It takes every flag, config key and environment variable of bin/worker.
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/tickflow/tickflow/chaos"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/examples/demo"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/worker"
)

func main() { cli.Main("chaos-worker", run) }

func run() error {
	cfg := config.DefaultWorker()
	execLog := flag.String("exec-log", "", "`directory` of the execution logs (required)")
	log, err := cli.Load("Usage: chaos-worker -exec-log DIR [flags]\n\nExecutes functions for the chaos suite: the example handlers and chaos.record.", &cfg, &cfg.Log)
	if err != nil {
		return err
	}
	if *execLog == "" {
		return errors.New("-exec-log is required: the directory chaos.record appends its executions to")
	}
	rec, err := chaos.OpenRecorder(*execLog)
	if err != nil {
		return err
	}
	defer func() { _ = rec.Close() }() // the execution log syncs each line as it is written

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := cli.Connect(cfg.NATS, cfg.Embedded, "worker", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	mux, err := demo.Mux(ctx, nc.Conn, log)
	if err != nil {
		return err
	}
	mux.Register(chaos.TypeRecord, rec)
	w, err := worker.New(ctx, nc.Conn, mux, worker.Options{Name: cfg.Name, Concurrency: cfg.Concurrency, Logger: log})
	if err != nil {
		return err
	}
	return w.Run(ctx)
}
