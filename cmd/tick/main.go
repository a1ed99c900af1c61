// Command tick publishes the ticks that make processors take steps: every
// interval, on a cron schedule, or once. Each tick asks, unless -steps says
// otherwise, for as many steps as a processor takes in one tick
// (processor.DefaultMaxSteps). Processors of the ready pace (the default)
// take ready work without ticks; ticks pace those set to -pace tick.
//
//	tick -domain payments -every 500ms
//	tick -domain payments,refunds -cron '*/5 * * * * *' -steps 8
//	tick -domain payments -once -wait
//
// Flags, the config file's tick: section and TICKFLOW_TICK_* variables
// configure it (see config.Tick); -wait, only with -once, sends each tick as
// a request and prints each processor's report as one JSON line on standard
// output, exiting 1 when a report's status is "error".
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/robfig/cron/v3"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/ticker"
)

func main() { cli.Main("tick", run) }

func run() error {
	cfg := config.DefaultTick()
	wait := flag.Bool("wait", false, "with -once: send each tick as a request and print the processor's report as JSON")
	metricsListen := cli.MetricsFlag("")
	waitTimeout := flag.Duration("wait-timeout", ticker.DefaultRequestTimeout, "with -wait: how long to wait for each report, a `duration`")
	log, err := cli.Load("Usage: tick -domain DOMAINS (-every D | -cron SPEC | -once [-wait]) [flags]\n\nPublishes the ticks that make processors take steps.", &cfg, &cfg.Log)
	if err != nil {
		return err
	}
	if *wait && !cfg.Once {
		return errors.New("-wait needs -once: only a single tick can wait for its report")
	}
	var sched cron.Schedule
	if cfg.Cron != "" {
		if sched, err = cfg.CronSchedule(); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	conn, err := cli.Connect(cfg.NATS, cfg.Embedded, "ticker", log)
	if err != nil {
		return err
	}
	defer conn.Close()
	nc := conn.Conn

	if *wait {
		return report(ctx, nc, cfg, *waitTimeout)
	}
	obs, err := cli.StartTelemetry(ctx, "tick", *metricsListen, log)
	if err != nil {
		return err
	}
	defer obs.Close()
	t, err := ticker.New(nc, ticker.Options{
		Domains:   cfg.Domains,
		Every:     cfg.Every,
		Schedule:  sched,
		Once:      cfg.Once,
		Steps:     cfg.Steps,
		Logger:    log,
		Telemetry: obs.Telemetry,
	})
	if err != nil {
		return err
	}
	log.Info("ticking", "domains", cfg.Domains, "every", cfg.Every, "cron", cfg.Cron, "once", cfg.Once, "steps", cfg.Steps, "nats", cfg.NATS)
	return t.Run(ctx)
}

// report ticks each domain as a request and prints its report as a JSON
// line, failing when a domain did not answer or reported an error.
func report(ctx context.Context, nc *nats.Conn, cfg config.Tick, timeout time.Duration) error {
	enc := json.NewEncoder(os.Stdout)
	var errs []error
	for _, d := range cfg.Domains {
		rctx, cancel := context.WithTimeout(ctx, timeout)
		rep, err := ticker.Request(rctx, nc, d, cfg.Steps)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := enc.Encode(rep); err != nil {
			return err
		}
		if rep.Status == api.TickError {
			errs = append(errs, fmt.Errorf("domain %s reported an error: %s", d, rep.Error))
		}
	}
	return errors.Join(errs...)
}
