package testsystem

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/dashboard"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// Owner is the owner authz runs with unless the test names another.
const Owner = "owner"

// upWait bounds the wait for a service to answer its first ping.
const upWait = 5 * time.Second

// Options say what runs beside the server. Every field is optional.
type Options struct {
	// Domains are provisioned, each with a processor when Processor is
	// set; default {"pay"}.
	Domains []string
	// NATS adjust the server and the stream settings before start.
	NATS []testnats.Option
	// TableFile has authz read its table from a file, System.TablePath,
	// which a test may rewrite; otherwise authz gets the parsed table.
	TableFile bool
	// Authz is authz's options; Start sets the table, and Owner when empty.
	Authz authz.Options
	// Handlers, when set, are served by a worker with the options Worker.
	Handlers *pipeline.ServeMux
	// Worker is the options of the worker serving Handlers.
	Worker worker.Options
	// Processor, when set, is the options of every domain's processor
	// (Domain set to each domain). The processors are built, not run.
	Processor *processor.Options
	// Dashboard, when set, adjusts the config of a dashboard served on a
	// loopback port (System.URL). The server then listens on loopback, and
	// the config it is given dials the server over TCP, as the dashboard
	// does where the server listens: a refused login ends at once, where
	// an in-process connection waits out the server's write deadline.
	Dashboard func(*dashboard.Config)
}

// System is a running server with the components Start was asked for.
type System struct {
	// Env is the server, its settings and its store.
	Env *testnats.Env
	// Ctx ends when the test does; every component runs under it, and a
	// test's requests may use it.
	Ctx context.Context
	// Domains are the provisioned domains.
	Domains []string
	// Admin is a JetStream context as admin, to look at streams.
	Admin jetstream.JetStream
	// AuthzJS is a JetStream context as authz, to enqueue as authz does.
	AuthzJS jetstream.JetStream
	// Table is the authorization table authz runs with; nil without authz.
	Table *authz.Table
	// TablePath is the table's file with Options.TableFile.
	TablePath string
	// Authz is the authz replica started last; nil without authz.
	Authz *authz.Service
	// StopAuthz stops that replica and waits for its Run to return; a
	// second call does nothing.
	StopAuthz func()
	// Proc is the first domain's processor, Procs every domain's, with
	// Options.Processor.
	Proc  *processor.Processor
	Procs map[string]*processor.Processor
	// URL is the dashboard's base URL with Options.Dashboard.
	URL string

	// tb is the test that started the system: the connections Conn
	// shares live as long as it does, not as a subtest that made them.
	tb        testing.TB
	authzOpts authz.Options
	mu        sync.Mutex
	conns     map[string]*nats.Conn
	owner     *client.Client
}

// Start starts the server, provisions o.Domains, and runs authz with
// table (YAML; none when empty), a worker with o.Handlers and the
// dashboard, and builds the processors; it returns once authz and the
// worker answer pings. Everything stops when the test ends.
func Start(t testing.TB, table string, o Options) *System {
	t.Helper()
	if len(o.Domains) == 0 {
		o.Domains = []string{"pay"}
	}
	natsOpts := o.NATS
	if o.Dashboard != nil {
		natsOpts = append(append([]testnats.Option{}, natsOpts...), func(eo *embedded.Options, _ *streams.Settings) {
			eo.DontListen, eo.Listen = false, "127.0.0.1:0"
		})
	}
	return StartOn(t, testnats.Start(t, o.Domains, natsOpts...), table, o)
}

// StartOn is Start on a server the test started (or restarted) itself,
// its domains provisioned: o.NATS and o.Dashboard's listener are the
// test's to have set when it started env.
func StartOn(t testing.TB, env *testnats.Env, table string, o Options) *System {
	t.Helper()
	if len(o.Domains) == 0 {
		o.Domains = []string{"pay"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := Attach(ctx, t, env, o.Domains...)
	var wait []string
	if table != "" {
		parsed, err := authz.ParseTable([]byte(table))
		if err != nil {
			t.Fatal(err)
		}
		s.authzOpts = o.Authz
		if o.TableFile {
			s.TablePath = filepath.Join(t.TempDir(), "authz.yaml")
			if err := os.WriteFile(s.TablePath, []byte(table), 0o600); err != nil {
				t.Fatal(err)
			}
			s.authzOpts.TablePath = s.TablePath
		} else {
			s.Table = parsed
			s.authzOpts.Table = parsed
		}
		s.RunAuthz(t, o.Authz)
		wait = append(wait, streams.AuthzService)
	}
	if o.Handlers != nil {
		s.RunWorker(ctx, t, o.Handlers, o.Worker)
		wait = append(wait, streams.WorkerService)
	}
	if o.Processor != nil {
		for _, d := range o.Domains {
			opts := *o.Processor
			opts.Domain = d
			s.Procs[d] = s.Processor(t, opts)
		}
		s.Proc = s.Procs[o.Domains[0]]
	}
	if o.Dashboard != nil {
		s.serveDashboard(t, o.Dashboard)
	}
	s.WaitUp(t, wait...)
	return s
}

// Attach is a System around a server a test started itself, with
// nothing running beside it: its connections, clients and observers,
// under ctx, for domains (provisioned by the test). RunAuthz then needs a
// table in its options.
func Attach(ctx context.Context, t testing.TB, env *testnats.Env, domains ...string) *System {
	t.Helper()
	return &System{
		Env: env, Ctx: ctx, Domains: domains,
		Admin: env.JS(t, "admin"), AuthzJS: env.JS(t, "authz"),
		StopAuthz: func() {}, Procs: map[string]*processor.Processor{},
		tb: t, conns: map[string]*nats.Conn{},
	}
}

// RunAuthz runs an authz replica with opts until the test ends or
// StopAuthz; without a table (Table, TablePath) in opts it runs the
// system's, and without an owner Owner. Run failing fails the test.
func (s *System) RunAuthz(t testing.TB, opts authz.Options) {
	t.Helper()
	if opts.Table == nil && opts.TablePath == "" {
		opts.Table, opts.TablePath = s.authzOpts.Table, s.authzOpts.TablePath
	}
	if opts.Owner == "" {
		opts.Owner = Owner
	}
	svc, err := authz.New(s.Ctx, s.Env.Conn(t, "authz"), opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Authz = svc
	s.StopAuthz = s.run(t, "authz", svc.Run)
}

// RunWorker runs one more worker serving mux until ctx or the test ends,
// and waits until a worker answers pings. Run failing fails the test.
func (s *System) RunWorker(ctx context.Context, t testing.TB, mux *pipeline.ServeMux, opts worker.Options) {
	t.Helper()
	w, err := worker.New(ctx, s.Env.Conn(t, "worker"), mux, opts)
	if err != nil {
		t.Fatal(err)
	}
	s.runUnder(ctx, t, "worker", w.Run)
	s.WaitUp(t, streams.WorkerService)
}

// Processor builds a processor on a connection of its own, for the first
// domain unless opts names one. It is not run: the test ticks it.
func (s *System) Processor(t testing.TB, opts processor.Options) *processor.Processor {
	t.Helper()
	if opts.Domain == "" {
		opts.Domain = s.Domains[0]
	}
	p, err := processor.New(s.Ctx, s.Env.Conn(t, "processor"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs a component until the test ends or the returned stop, which
// waits for Run to return (testnats.Stopped) and may be called again.
func (s *System) run(t testing.TB, what string, run func(context.Context) error) func() {
	return s.runUnder(s.Ctx, t, what, run)
}

// runUnder is run under ctx, which may end before the test.
func (s *System) runUnder(ctx context.Context, t testing.TB, what string, run func(context.Context) error) func() {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx); err != nil {
			t.Errorf("%s: Run: %v", what, err)
		}
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); testnats.Stopped(t, what, done) }) }
	t.Cleanup(stop)
	return stop
}

// serveDashboard serves the dashboard on a loopback port, with the config
// adjust makes.
func (s *System) serveDashboard(t testing.TB, adjust func(*dashboard.Config)) {
	t.Helper()
	url := s.Env.Server.URL()
	cfg := dashboard.Config{Dial: func(user, password string) (*nats.Conn, error) {
		return streams.Connect(streams.Credentials{URL: url, User: user, Password: password, Name: "dashboard-" + user})
	}}
	adjust(&cfg)
	d, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.URL = "http://" + ln.Addr().String()
	s.run(t, "dashboard", func(ctx context.Context) error { return d.Serve(ctx, ln) })
}

// WaitUp waits until each micro service named answers a ping.
func (s *System) WaitUp(t testing.TB, services ...string) {
	t.Helper()
	if len(services) == 0 {
		return
	}
	admin := s.Conn(t, "admin")
	testnats.Eventually(t, upWait, "services up", func() bool {
		for _, name := range services {
			if _, err := admin.Request("$SRV.PING."+name, nil, 100*time.Millisecond); err != nil {
				return false
			}
		}
		return true
	})
}

// Conn is the system's one connection as user, made on first use; it
// closes when the test that started the system ends.
func (s *System) Conn(t testing.TB, user string) *nats.Conn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if nc, ok := s.conns[user]; ok {
		return nc
	}
	nc := s.Env.Conn(s.tb, user)
	s.conns[user] = nc
	return nc
}

// Client is a client of authz as user, on a connection of its own.
func (s *System) Client(t testing.TB, user string, cfg client.Config) *client.Client {
	t.Helper()
	c, err := client.New(s.Env.Conn(t, user), user, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ownerClient is the owner's client over Conn, made on first use.
func (s *System) ownerClient(t testing.TB) *client.Client {
	t.Helper()
	s.mu.Lock()
	c := s.owner
	s.mu.Unlock()
	if c != nil {
		return c
	}
	c, err := client.New(s.Conn(t, Owner), Owner, client.Config{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.owner = c
	s.mu.Unlock()
	return c
}

// Retryable reports whether err says authz is not serving at the moment
// (a replica starting or stopping): a request worth sending again.
func Retryable(err error) bool {
	return errors.Is(err, client.ErrNotRunning) || errors.Is(err, client.ErrUnavailable)
}
