// Command authz runs the authorization service: the only identity allowed
// to put batches on the queues. Callers reach it as the micro service
// "authz" on authz.<user>.<operation> (docs/api.md lists the operations).
//
//	NATS_USER=authz NATS_PASSWORD=local-authz authz -table authz.yaml
//
// Flags, the config file's authz: section and TICKFLOW_AUTHZ_* variables
// configure it (see config.Authz; -h lists them all).
//
// The streams, consumers and buckets must have been provisioned: started
// before, authz exits with an error matching authz.ErrNotProvisioned.
// -domain provisions them at start, which needs a user allowed to create
// streams (admin), not authz.
//
// SIGHUP reloads the authorization table; SIGINT or SIGTERM stops taking
// requests, lets those in flight finish, drains and exits 0. Run as many
// replicas as you like: batch ids come from one JetStream sequence and every
// record is written with compare-and-set.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/internal/streams"
)

func main() { cli.Main("authz", run) }

func run() error {
	cfg := config.DefaultAuthz()
	metricsListen := cli.MetricsFlag("")
	log, err := cli.Load("Usage: authz [flags]\n\nServes the authorization API and records every batch's outcome.", &cfg, &cfg.Log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	nc, err := cli.Connect(cfg.NATS, cfg.Embedded, "authz", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	obs, err := cli.StartTelemetry(ctx, "authz", *metricsListen, log)
	if err != nil {
		return err
	}
	defer obs.Close()
	if len(cfg.Domains) > 0 {
		// Provisioning needs a user allowed to create streams (admin); a
		// user without the right sees its requests time out.
		js, err := jetstream.New(nc.Conn)
		if err != nil {
			return err
		}
		if err := streams.Provision(ctx, js, cfg.Streams.Settings(), cfg.Domains...); err != nil {
			return fmt.Errorf("provision %v (needs a user allowed to create streams, e.g. admin; connected as %s): %w", cfg.Domains, cli.Identity(cfg.NATS), err)
		}
		log.Info("provisioned", "domains", cfg.Domains)
	}
	svc, err := authz.New(ctx, nc.Conn, authz.Options{Owner: cfg.Owner, TablePath: cfg.Table, Logger: log, Telemetry: obs.Telemetry})
	if err != nil {
		return err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			if err := svc.Reload(); err != nil {
				log.Error("authorization table not reloaded; the old one stays", "err", err)
				continue
			}
			svc.WarnUnserved(ctx, "reload")
		}
	}()
	return svc.Run(ctx)
}
