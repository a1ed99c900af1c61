// Command run runs the whole system on one machine: an embedded nats-server
// from nats.conf (listening on 127.0.0.1:4222 so the nats CLI can watch),
// authz, a worker with the example handlers, a processor per domain and a
// ticker; then, with -demo (the default), a client submits a mixed workload
// and a table of outcomes is printed. The system keeps running until SIGINT
// or SIGTERM, so it can be explored with the nats CLI (README.md).
//
//	go run ./cmd/run
//
// Every component connects in-process as its own nats.conf user with the
// local-default password, so the permissions are the real ones.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/internal/demo"
	"github.com/tickflow/tickflow/internal/system"
)

func main() { cli.Main("run", run) }

func run() error {
	cfg := config.DefaultRun()
	table := flag.String("table", "authz.yaml", "authorization table `file`")
	log, err := cli.Load("Usage: run [flags]\n\nRuns the whole system on this machine with an embedded nats-server.", &cfg, &cfg.Log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	srv, err := embedded.Start(embedded.Options{
		ConfigFile: cfg.Embedded.ConfigFile, DataDir: cfg.Embedded.DataDir, Listen: cfg.Embedded.Listen,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Info("nats-server started", "url", srv.URL(), "data_dir", cfg.Embedded.DataDir, "config", cfg.Embedded.ConfigFile)

	err = system.Run(ctx, system.Options{
		Server: srv, Settings: cfg.Streams.Settings(), Domains: cfg.Domains, TickEvery: cfg.TickEvery,
		TablePath: *table, Demo: cfg.Demo, Logger: log,
		OnDemo: func(rows []demo.Row) {
			fmt.Println()
			demo.Print(os.Stdout, rows)
			fmt.Printf("\nThe system keeps running; nats-server listens on %s. Ctrl-C stops it.\n", srv.URL())
			fmt.Println("Watch it with the nats CLI as README.md shows, e.g.: nats --user admin --password local-admin stream ls")
		},
	})
	log.Info("tickflow stopped")
	return err
}
