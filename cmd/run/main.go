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
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/internal/demo"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/pipeline/steps"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/streams"
	"github.com/tickflow/tickflow/ticker"
	"github.com/tickflow/tickflow/worker"
	"golang.org/x/sync/errgroup"
)

func main() { cli.Main("run", run) }

func run() error {
	cfg := config.DefaultRun()
	table := flag.String("table", "authz.yaml", "authorization table `file`")
	flag.CommandLine.Usage = cli.Usage(flag.CommandLine, "Usage: run [flags]\n\nRuns the whole system on this machine with an embedded nats-server.", &cfg)
	if err := config.Parse(flag.CommandLine, os.Args[1:], &cfg, os.Getenv); err != nil {
		return err
	}
	log, err := cfg.Log.Logger(os.Stderr)
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

	var conns []*nats.Conn
	defer func() {
		for i := len(conns) - 1; i >= 0; i-- {
			_ = conns[i].Drain()
		}
	}()
	connect := func(user string) (*nats.Conn, error) {
		nc, err := streams.Connect(streams.Credentials{User: user, Password: "local-" + user, Name: "run-" + user},
			append(cli.Handlers(log.With("conn", user), make(chan struct{})), srv.InProcess())...)
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}
	admin, err := connect("admin")
	if err != nil {
		return err
	}
	js, err := jetstream.New(admin)
	if err != nil {
		return err
	}
	if err := streams.Provision(ctx, js, cfg.Streams.Settings(), cfg.Domains...); err != nil {
		return err
	}
	log.Info("provisioned", "domains", cfg.Domains)

	g, gctx := errgroup.WithContext(ctx)
	az, err := connect("authz")
	if err != nil {
		return err
	}
	svc, err := authz.New(gctx, az, authz.Options{TablePath: *table, Logger: log})
	if err != nil {
		return err
	}
	g.Go(func() error { return svc.Run(gctx) })

	wc, err := connect("worker")
	if err != nil {
		return err
	}
	mux, err := exampleMux(gctx, wc, log)
	if err != nil {
		return err
	}
	w, err := worker.New(gctx, wc, mux, worker.Options{Name: "worker-1", Logger: log})
	if err != nil {
		return err
	}
	g.Go(func() error { return w.Run(gctx) })

	pc, err := connect("processor")
	if err != nil {
		return err
	}
	for _, d := range cfg.Domains {
		p, err := processor.New(gctx, pc, processor.Options{Domain: d, Name: "processor-1", Logger: log})
		if err != nil {
			return err
		}
		g.Go(func() error { return p.Run(gctx) })
	}

	tc, err := connect("ticker")
	if err != nil {
		return err
	}
	tk, err := ticker.New(tc, ticker.Options{Domains: cfg.Domains, Every: cfg.TickEvery, Steps: 8, Logger: log})
	if err != nil {
		return err
	}
	g.Go(func() error { return tk.Run(gctx) })

	if cfg.Demo {
		clients := demo.Clients{}
		for _, c := range []struct {
			user string
			dst  **nats.Conn
		}{{"alice", &clients.Alice}, {"bob", &clients.Bob}, {"oracle", &clients.Oracle}, {"owner", &clients.Owner}} {
			if *c.dst, err = connect(c.user); err != nil {
				return err
			}
		}
		g.Go(func() error {
			rows, err := demo.Run(gctx, clients, log)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Println()
			demo.Print(os.Stdout, rows)
			fmt.Printf("\nThe system keeps running; nats-server listens on %s. Ctrl-C stops it.\n", srv.URL())
			fmt.Println("Watch it with the nats CLI as README.md shows, e.g.: nats --user admin --password local-admin stream ls")
			return nil
		})
	}
	log.Info("tickflow running", "domains", cfg.Domains, "tick_every", cfg.TickEvery.String(), "demo", cfg.Demo)
	err = g.Wait()
	log.Info("tickflow stopped")
	return err
}

// exampleMux registers the example handlers and the underwriting step
// pipeline, whose runs are kept in the runs bucket.
func exampleMux(ctx context.Context, nc *nats.Conn, log *slog.Logger) (*pipeline.ServeMux, error) {
	mux := pipeline.NewServeMux()
	handlers.Register(mux, handlers.NewLedger(map[string]int64{"alice": 1000, "bob": 500}))
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	store, err := streams.NewRunStore(ctx, js)
	if err != nil {
		return nil, err
	}
	_, err = underwriting.Register(mux, store, underwriting.Processors{
		ClearBusinessReport: &underwriting.ClearBusinessReport{Records: demo.DemoRecords},
	}, steps.WithLogger(log))
	return mux, err
}
