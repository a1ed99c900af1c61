// Command tick publishes the ticks that make processors take steps: every
// interval, on a cron schedule, or once.
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
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/robfig/cron/v3"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/streams"
	"github.com/tickflow/tickflow/ticker"
)

func main() {
	if err := run(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "tick:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg := config.DefaultTick()
	wait := flag.Bool("wait", false, "with -once: send each tick as a request and print the processor's report as JSON")
	waitTimeout := flag.Duration("wait-timeout", ticker.DefaultRequestTimeout, "with -wait: how long to wait for each report, a `duration`")
	if err := config.Parse(flag.CommandLine, os.Args[1:], &cfg, os.Getenv); err != nil {
		return err
	}
	if *wait && !cfg.Once {
		return errors.New("-wait needs -once: only a single tick can wait for its report")
	}
	log, err := cfg.Log.Logger(os.Stderr)
	if err != nil {
		return err
	}
	var sched cron.Schedule
	if cfg.Cron != "" {
		if sched, err = cfg.CronSchedule(); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	nc, err := streams.Connect(streams.Credentials{
		URL:      cfg.NATS.ServerURL(),
		User:     cfg.NATS.User,
		Password: cfg.NATS.Password,
		Creds:    cfg.NATS.Creds,
		NKey:     cfg.NATS.NKey,
		Name:     cfg.NATS.Name,
	}, logHandlers(log)...)
	if err != nil {
		return err
	}
	defer nc.Close()

	if *wait {
		return report(ctx, nc, cfg, *waitTimeout)
	}
	t, err := ticker.New(nc, ticker.Options{
		Domains:  cfg.Domains,
		Every:    cfg.Every,
		Schedule: sched,
		Once:     cfg.Once,
		Steps:    cfg.Steps,
		Logger:   log,
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
		if rep.Status == processor.StatusError {
			errs = append(errs, fmt.Errorf("domain %s reported an error: %s", d, rep.Error))
		}
	}
	return errors.Join(errs...)
}

// logHandlers log what the connection does in the background: a publish
// the server denied arrives only here.
func logHandlers(log *slog.Logger) []nats.Option {
	return []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			log.Error("nats error", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
	}
}
