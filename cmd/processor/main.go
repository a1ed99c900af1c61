// Command processor serves domains: it takes each domain's executable
// batches (High before Med) and runs their steps through the workers. By
// default (-pace ready) it takes ready work as soon as it is ready, up to
// -concurrency steps at once, and waits on the server while the domain is
// idle; each tick on tick.<domain> also makes it take steps, and with
// -pace tick only ticks do. -throttle caps a domain's steps per second
// across every replica. It serves every domain given, one
// processor.Processor per domain on one connection.
//
//	NATS_USER=processor NATS_PASSWORD=local-processor processor -domain payments,reports
//	NATS_USER=processor NATS_PASSWORD=local-processor processor -domain reports -pace tick
//	NATS_USER=processor NATS_PASSWORD=local-processor processor -domain payments -throttle 200
//	NATS_USER=admin NATS_PASSWORD=local-admin processor -domain payments -provision
//	NATS_USER=admin NATS_PASSWORD=local-admin processor -domain payments -provision-only
//
// Flags, the config file's processor: section and TICKFLOW_PROCESSOR_*
// variables configure it (see config.Processor; -h lists them all).
// -provision creates or updates the streams, buckets and the domains'
// consumers first, which only a user allowed to create streams may do (admin
// in nats.conf); without it they must exist already. -provision-only does
// that and exits, a setup step before the processes start.
//
// Run as many replicas as you like: the replicas of a domain share its
// durable consumer proc-<domain>, which spreads the ready tokens over them,
// and the tick queue group, so each tick goes to one of them; any of them
// may die at any moment. SIGINT or SIGTERM
// stops taking ticks, lets the steps already taken finish, drains the
// connection and exits 0. docs/operations.md has the details.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/processor"
	"golang.org/x/sync/errgroup"
)

// role is the nats.conf user whose permissions the processor needs.
const role = "processor"

func main() { cli.Main("processor", run) }

func run() error {
	cfg := config.DefaultProcessor()
	metricsListen := cli.MetricsFlag("")
	log, err := cli.Load("Usage: processor -domain DOMAINS [flags]\n\nServes the domains' batches: takes ready work at once (-pace ready) or on ticks only (-pace tick).", &cfg, &cfg.Log)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := cli.Connect(cfg.NATS, cfg.Embedded, role, log)
	if err != nil {
		return err
	}
	defer nc.Close()

	if cfg.Provision || cfg.ProvisionOnly {
		if err := provision(ctx, nc.Conn, cfg); err != nil {
			return err
		}
		log.Info("provisioned", "domains", cfg.Domains, "replicas", cfg.Streams.Replicas, "storage", cfg.Streams.Storage)
		if cfg.ProvisionOnly {
			return nil
		}
	}

	obs, err := cli.StartTelemetry(ctx, "processor", *metricsListen, log)
	if err != nil {
		return err
	}
	defer obs.Close()
	procs := make([]*processor.Processor, 0, len(cfg.Domains))
	for _, d := range cfg.Domains {
		o := options(cfg, d, log)
		o.Telemetry = obs.Telemetry
		p, err := processor.New(ctx, nc.Conn, o)
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	log.Info("processor starting", "name", cfg.Name, "domains", cfg.Domains,
		"concurrency", cfg.Concurrency, "max_steps", cfg.MaxSteps, "pace", cfg.Pace, "throttle", cfg.Throttle, "work_timeout", cfg.WorkTimeout.String(),
		"max_wait", cfg.MaxWait.String(), "poison_retries", cfg.PoisonRetries)

	g, gctx := errgroup.WithContext(ctx)
	for _, p := range procs {
		g.Go(func() error { return p.Run(gctx) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	log.Info("processor stopped", "name", cfg.Name)
	return nil
}

// options are the processor.Options of domain d under cfg.
func options(cfg config.Processor, d string, log *slog.Logger) processor.Options {
	return processor.Options{
		Senders:       cfg.SendersOf(d),
		SenderShare:   cfg.SenderShare,
		Domain:        d,
		Name:          cfg.Name,
		Concurrency:   cfg.Concurrency,
		Pace:          processor.Pace(cfg.Pace),
		IdleWait:      cfg.IdleWait,
		Throttle:      cfg.Throttle,
		MaxSteps:      cfg.MaxSteps,
		WorkTimeout:   cfg.WorkTimeout,
		MaxWait:       cfg.MaxWait,
		PoisonRetries: cfg.PoisonRetries,
		Logger:        log,
	}
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
		return fmt.Errorf("provision: %w (-provision needs a user allowed to create streams and consumers, e.g. admin; connected as %s)", err, cli.Identity(cfg.NATS))
	}
	if err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	return nil
}
