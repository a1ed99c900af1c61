// Package system wires the whole of tickflow around one nats-server: authz,
// a worker with the example handlers, a processor per domain, a ticker and,
// optionally, the demo client. cmd/run uses it on an embedded server, and its
// test runs the demo end to end.
package system

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/examples/demo"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/telemetry"
	"github.com/tickflow/tickflow/ticker"
	"github.com/tickflow/tickflow/worker"
	"golang.org/x/sync/errgroup"
)

// TickSteps is how many steps each tick asks for: as many as a processor
// takes (processor.DefaultMaxSteps). In the ready pace the processors take
// ready work without waiting for ticks, and a tick is one more invitation;
// in the tick pace the ticker bounds the drain at TickSteps per interval
// per domain.
const TickSteps = processor.DefaultMaxSteps

// Options say what to run. Every field is required unless it says otherwise.
type Options struct {
	// Server is the nats-server every component connects to in-process, each
	// as its own nats.conf user with the local-default password.
	Server *embedded.Server
	// Settings size the resources provisioned at start.
	Settings streams.Settings
	// Domains get a processor each and are ticked.
	Domains []string
	// TickEvery is the ticker's interval.
	TickEvery time.Duration
	// Pace, optional, is the processors' pace; default processor.PaceReady.
	Pace processor.Pace
	// Throttle, optional, caps each domain's steps per second; default 0:
	// none.
	Throttle int
	// TablePath is the authorization table file.
	TablePath string
	// Demo submits the demo workload once everything runs.
	Demo bool
	// Senders, optional, are the sender pools: secret references by
	// domain and sender name (worker.Options.Senders); each domain's
	// processor leases its names.
	Senders map[string]map[string]string
	// OnDemo, optional, receives the demo's outcomes; none when the demo
	// ran in this store before and submitted nothing (demo.ErrRanBefore).
	OnDemo func([]demo.Row)
	// Logger receives every component's logs.
	Logger *slog.Logger
	// Telemetry, optional, receives every component's metrics, readiness
	// and spans: one registry, served on one address.
	Telemetry *telemetry.Telemetry
	// Dashboard, optional, is where the web dashboard is served; Run
	// closes it.
	Dashboard net.Listener
	// DashboardPublicURL, optional, is the https origin the browser uses
	// to reach the dashboard (dashboard.Config.PublicURL).
	DashboardPublicURL string
	// DashboardHosts, optional, names further hosts the dashboard answers
	// to (dashboard.Config.Hosts).
	DashboardHosts []string
}

// Run provisions the resources, runs every component until ctx is done,
// then stops them and drains their connections.
func Run(ctx context.Context, o Options) error {
	srv, log := o.Server, o.Logger
	if o.Dashboard != nil {
		// When nothing served on it; after Serve, the listener is closed already.
		defer func() { _ = o.Dashboard.Close() }()
	}
	var conns []*nats.Conn
	defer func() {
		for i := len(conns) - 1; i >= 0; i-- {
			_ = conns[i].Drain()
		}
	}()
	connect := func(user string) (*nats.Conn, error) {
		nc, err := streams.Connect(streams.Credentials{User: user, Password: "local-" + user, Name: "run-" + user},
			append(conn.Handlers(log.With("conn", user), make(chan struct{})), srv.InProcess())...)
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
	if err := streams.Provision(ctx, js, o.Settings, o.Domains...); err != nil {
		return err
	}
	log.Info("provisioned", "domains", o.Domains)

	// Every component is built before any runs: an error building one
	// returns with nothing started, so nothing is left running behind it.
	var runs []func(context.Context) error
	az, err := connect("authz")
	if err != nil {
		return err
	}
	svc, err := authz.New(ctx, az, authz.Options{TablePath: o.TablePath, Logger: log, Telemetry: o.Telemetry})
	if err != nil {
		return err
	}
	runs = append(runs, svc.Run)

	wc, err := connect("worker")
	if err != nil {
		return err
	}
	var echo *demo.Echo
	var allowHTTP []string
	if o.Demo {
		// The demo's http.post target, on loopback: open exactly that.
		if echo, err = demo.StartEcho(); err != nil {
			return err
		}
		defer func() { _ = echo.Close() }() // a loopback test endpoint of the demo
		allowHTTP = append(allowHTTP, echo.Addr)
	}
	mux, err := demo.Mux(ctx, wc, log, allowHTTP...)
	if err != nil {
		return err
	}
	w, err := worker.New(ctx, wc, mux, worker.Options{Name: "worker-1", Logger: log, Senders: o.Senders, Telemetry: o.Telemetry})
	if err != nil {
		return err
	}
	runs = append(runs, w.Run)

	pc, err := connect("processor")
	if err != nil {
		return err
	}
	for _, d := range o.Domains {
		p, err := processor.New(ctx, pc, processor.Options{Domain: d, Name: "processor-1", Logger: log, Senders: slices.Sorted(maps.Keys(o.Senders[d])), Telemetry: o.Telemetry,
			Pace: o.Pace, Throttle: o.Throttle})
		if err != nil {
			return err
		}
		runs = append(runs, p.Run)
	}

	tc, err := connect("ticker")
	if err != nil {
		return err
	}
	tk, err := ticker.New(tc, ticker.Options{Domains: o.Domains, Every: o.TickEvery, Steps: TickSteps, Logger: log, Telemetry: o.Telemetry})
	if err != nil {
		return err
	}
	runs = append(runs, tk.Run)

	if o.Dashboard != nil {
		run, err := dashboardRun(srv, o.Dashboard, o.DashboardPublicURL, o.DashboardHosts, log)
		if err != nil {
			return err
		}
		runs = append(runs, run)
	}

	var clients demo.Clients
	if o.Demo {
		for _, c := range []struct {
			user string
			dst  **nats.Conn
		}{{"alice", &clients.Alice}, {"bob", &clients.Bob}, {"oracle", &clients.Oracle}, {"owner", &clients.Owner}} {
			if *c.dst, err = connect(c.user); err != nil {
				return err
			}
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	for _, run := range runs {
		g.Go(func() error { return run(gctx) })
	}
	if o.Demo {
		g.Go(func() error {
			rows, err := demo.Run(gctx, clients, echo, log)
			if errors.Is(err, context.Canceled) {
				return nil
			}
			if errors.Is(err, demo.ErrRanBefore) {
				log.Info("demo: not submitted again", "reason", err.Error())
				if o.OnDemo != nil {
					o.OnDemo(nil)
				}
				return nil
			}
			if err != nil {
				return err
			}
			if o.OnDemo != nil {
				o.OnDemo(rows)
			}
			return nil
		})
	}
	log.Info("tickflow running", "domains", o.Domains, "tick_every", o.TickEvery.String(), "pace", string(o.Pace), "throttle", o.Throttle, "demo", o.Demo)
	return g.Wait()
}
