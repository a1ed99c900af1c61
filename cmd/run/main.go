// Command run runs the whole system on one machine: an embedded nats-server
// from nats.conf (listening on 127.0.0.1:4222 so the nats CLI can watch),
// authz, a worker with the example handlers, a processor per domain (taking
// ready work at once: -pace ready, the default) and a ticker; then, with
// -demo (the default), a client submits a mixed workload and a table of
// outcomes is printed. The web dashboard is served on 127.0.0.1:8090
// (-dashboard; log in as a nats.conf user). The system keeps running until
// SIGINT or SIGTERM, so it can be explored with the nats CLI and the
// dashboard (README.md).
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
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/examples/demo"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/internal/system"
	"github.com/tickflow/tickflow/processor"
)

// DefaultMetricsListen is where run serves /metrics, /healthz and /readyz
// unless -metrics-listen says otherwise.
const DefaultMetricsListen = "127.0.0.1:9464"

func main() { cli.Main("run", run) }

func run() error {
	cfg := config.DefaultRun()
	table := flag.String("table", "authz.yaml", "authorization table `file`")
	metricsListen := cli.MetricsFlag(DefaultMetricsListen)
	dashAddr := flag.String("dashboard", "127.0.0.1:8090", "listen `address` of the web dashboard; empty for none")
	dashPublic := flag.String("dashboard-public-url", "", "the https `origin` browsers reach the dashboard at, through a TLS-terminating proxy (https://host[:port]): the session cookie is then Secure, a POST must come from it, and the dashboard answers to its host")
	dashHosts := flag.String("dashboard-hosts", "", "comma-separated `hosts` the dashboard answers to besides the address it is reached at and localhost (name or name:port, e.g. dash.lan); any other Host is refused with 421")
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
	obs, err := cli.StartTelemetry(ctx, "run", *metricsListen, log)
	if err != nil {
		return err
	}
	defer obs.Close()
	if a := obs.Addr(); a != "" {
		fmt.Printf("Metrics: http://%s/metrics (health /healthz, readiness /readyz)\n", a)
	}

	dash, dashURL, err := listenDashboard(*dashAddr)
	if err != nil {
		return err
	}
	if dash != nil {
		log.Info("dashboard", "url", dashURL, "login", "a nats.conf user, e.g. owner / local-owner")
	}

	err = system.Run(ctx, system.Options{
		Server: srv, Settings: cfg.Streams.Settings(), Domains: cfg.Domains, TickEvery: cfg.TickEvery,
		Pace: processor.Pace(cfg.Pace), Throttle: cfg.Throttle,
		TablePath: *table, Demo: cfg.Demo, Logger: log, Telemetry: obs.Telemetry, Senders: cfg.SenderSecrets(), Dashboard: dash,
		DashboardPublicURL: *dashPublic, DashboardHosts: hostList(*dashHosts),
		OnDemo: func(rows []demo.Row) {
			fmt.Println()
			if len(rows) == 0 {
				fmt.Printf("The demo ran in this store before (%s): it submits nothing again, so its batches and dead letters are those of its first run.\n", cfg.Embedded.DataDir)
				fmt.Println("Start with an empty -data-dir to see it run afresh.")
			} else {
				demo.Print(os.Stdout, rows)
				fmt.Println("EXECUTIONS counts each batch's executions: one per function (an atomic unit counts one), one more per retry.")
			}
			fmt.Printf("\nThe system keeps running; nats-server listens on %s. Ctrl-C stops it.\n", srv.URL())
			fmt.Println("Watch it with the nats CLI as README.md shows, e.g.: nats --user admin --password local-admin stream ls")
			if dash != nil {
				fmt.Printf("Dashboard: %s (log in as a nats.conf user, e.g. owner / local-owner).\n", dashURL)
			}
		},
	})
	log.Info("tickflow stopped")
	return err
}

// hostList splits the value of -dashboard-hosts; nil when empty.
func hostList(s string) []string {
	var hosts []string
	for h := range strings.SplitSeq(s, ",") {
		if h = strings.TrimSpace(h); h != "" {
			hosts = append(hosts, h)
		}
	}
	return hosts
}

// listenDashboard listens on addr for the dashboard; nil when addr is empty.
func listenDashboard(addr string) (net.Listener, string, error) {
	if addr == "" {
		return nil, "", nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("dashboard: listen on %s (pick another with -dashboard, or -dashboard '' for none): %w", addr, err)
	}
	return ln, "http://" + ln.Addr().String(), nil
}
