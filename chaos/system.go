package chaos

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/streams"
)

// Domain is the domain every chaos batch runs in.
const Domain = "chaos"

// Labels of the chaos authorization table (table.yaml).
const (
	// LabelSteps runs its functions one per step (non-atomic).
	LabelSteps = "chaos"
	// LabelAtomic runs its functions as one atomic unit.
	LabelAtomic = "chaos-atomic"
	// LabelSlow runs its functions one per step with few retries.
	LabelSlow = "chaos-slow"
)

// tableYAML is the authorization table authz runs with.
//
//go:embed table.yaml
var tableYAML []byte

// SystemConfig says what to run. The zero value of a field means its
// default.
type SystemConfig struct {
	// Dir holds the configs, stores and logs. Required.
	Dir string
	// Root is the repository root, whose nats.conf the servers load. Required.
	Root string
	// Bin are the built commands. Required.
	Bin Binaries
	// Servers is 1 or, for a cluster, 3. Default 1.
	Servers int
	// Settings size the streams; Replicas is set to Servers. Default
	// streams.DefaultSettings.
	Settings streams.Settings
	// Processors and Workers are how many of each run. Default 2.
	Processors, Workers int
	// WorkerConcurrency is each worker's handler calls at once. Default 16.
	WorkerConcurrency int
	// WorkTimeout is the processors' worker request deadline. Default 10s.
	WorkTimeout time.Duration
	// TickEvery and TickSteps drive the ticker. Default 50ms and 8.
	TickEvery time.Duration
	TickSteps int
}

// System is tickflow running as separate processes.
type System struct {
	cfg        SystemConfig
	journal    *Journal
	Servers    []*Server
	Authz      *Proc
	Processors []*Proc
	Workers    []*Proc
	Ticker     *Proc
	// ExecDir holds the workers' execution logs.
	ExecDir string
}

// StartSystem starts the servers, provisions the domain as admin, then
// starts authz, the processors, the workers and the ticker, and waits
// until each says it serves.
func StartSystem(ctx context.Context, cfg SystemConfig) (*System, error) {
	if cfg.Servers == 0 {
		cfg.Servers = 1
	}
	if cfg.Settings.Replicas == 0 {
		cfg.Settings = streams.DefaultSettings()
	}
	cfg.Settings.Replicas = cfg.Servers
	if cfg.Processors == 0 {
		cfg.Processors = 2
	}
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	if cfg.WorkerConcurrency == 0 {
		cfg.WorkerConcurrency = 16
	}
	if cfg.WorkTimeout == 0 {
		cfg.WorkTimeout = 10 * time.Second
	}
	if cfg.TickEvery == 0 {
		cfg.TickEvery = 50 * time.Millisecond
	}
	if cfg.TickSteps == 0 {
		cfg.TickSteps = 8
	}
	s := &System{cfg: cfg, journal: &Journal{}, ExecDir: filepath.Join(cfg.Dir, "exec")}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	var err error
	if s.Servers, err = newServers(cfg.Dir, filepath.Join(cfg.Root, "nats.conf"), cfg.Bin.NATSServer, cfg.Servers, s.journal); err != nil {
		return nil, err
	}
	for _, srv := range s.Servers {
		if err := srv.Start(); err != nil {
			return nil, err
		}
	}
	admin, err := s.Connect("admin")
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := waitJetStream(rctx, admin); err != nil {
		return nil, err
	}
	if err := provision(rctx, admin, cfg.Settings, Domain); err != nil {
		return nil, err
	}
	if err := s.startComponents(); err != nil {
		return nil, err
	}
	if err := s.waitServing(rctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// URLs lists every server's client URL, comma-separated.
func (s *System) URLs() string {
	urls := make([]string, len(s.Servers))
	for i, srv := range s.Servers {
		urls[i] = srv.URL()
	}
	return strings.Join(urls, ",")
}

// Journal is the record of the kills dealt to the system.
func (s *System) Journal() *Journal { return s.journal }

// Connect connects to the servers as a nats.conf user with its local
// password, reconnecting forever.
func (s *System) Connect(user string) (*nats.Conn, error) {
	var nc *nats.Conn
	var err error
	// The servers may be starting: their port opens a moment after the process.
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err = streams.Connect(streams.Credentials{URL: s.URLs(), User: user, Password: "local-" + user, Name: "chaos-" + user})
		if err == nil || time.Now().After(deadline) {
			return nc, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// component builds a tickflow command's process connected as user.
func (s *System) component(name, kind, bin, user string, args ...string) *Proc {
	args = append(args, "-nats-url", s.URLs(), "-log-format", "json")
	env := childEnv("NATS_USER="+user, "NATS_PASSWORD=local-"+user)
	return newProc(name, kind, bin, args, env, filepath.Join(s.cfg.Dir, name+".log"), s.journal)
}

func (s *System) startComponents() error {
	table := filepath.Join(s.cfg.Dir, "authz.yaml")
	if err := os.WriteFile(table, tableYAML, 0o644); err != nil {
		return err
	}
	s.Authz = s.component("authz", KindAuthz, s.cfg.Bin.Authz, "authz", "-table", table)
	for i := range s.cfg.Processors {
		name := fmt.Sprintf("processor-%d", i+1)
		s.Processors = append(s.Processors, s.component(name, KindProcessor, s.cfg.Bin.Processor, "processor",
			"-domain", Domain, "-name", name, "-work-timeout", s.cfg.WorkTimeout.String()))
	}
	for i := range s.cfg.Workers {
		name := fmt.Sprintf("worker-%d", i+1)
		s.Workers = append(s.Workers, s.component(name, KindWorker, s.cfg.Bin.Worker, "worker",
			"-name", name, "-concurrency", strconv.Itoa(s.cfg.WorkerConcurrency), "-exec-log", s.ExecDir))
	}
	s.Ticker = s.component("ticker", KindTicker, s.cfg.Bin.Tick, "ticker",
		"-domain", Domain, "-every", s.cfg.TickEvery.String(), "-steps", strconv.Itoa(s.cfg.TickSteps))
	for _, p := range s.components() {
		if err := p.Start(); err != nil {
			return err
		}
	}
	return nil
}

// components lists authz, the processors, the workers and the ticker.
func (s *System) components() []*Proc {
	var out []*Proc
	if s.Authz != nil {
		out = append(out, s.Authz)
	}
	out = append(out, s.Processors...)
	out = append(out, s.Workers...)
	if s.Ticker != nil {
		out = append(out, s.Ticker)
	}
	return out
}

// serving is the log message each kind writes once it serves.
var serving = map[string]string{
	KindAuthz:     `"msg":"authz serving"`,
	KindProcessor: `"msg":"processor serving"`,
	KindWorker:    `"msg":"worker serving"`,
	KindTicker:    `"msg":"ticking"`,
}

func (s *System) waitServing(ctx context.Context) error {
	for _, p := range s.components() {
		for !p.LogContains(serving[p.Kind]) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w: %s does not serve; its log ends:\n%s", ErrNotReady, p.Name, p.LogTail(10))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Targets returns the processes of kind.
func (s *System) Targets(kind string) []*Proc {
	var out []*Proc
	for _, p := range s.components() {
		if p.Kind == kind {
			out = append(out, p)
		}
	}
	if kind == KindServer {
		for _, srv := range s.Servers {
			out = append(out, srv.Proc)
		}
	}
	return out
}

// StopComponents stops authz, the processors, the workers and the ticker
// gracefully (SIGTERM, then SIGKILL after a grace longer than a work
// request).
func (s *System) StopComponents() {
	grace := s.cfg.WorkTimeout + 5*time.Second
	for _, p := range s.components() {
		p.Stop(grace)
	}
}

// Stop stops everything, the servers last.
func (s *System) Stop() {
	s.StopComponents()
	for _, srv := range s.Servers {
		if srv.Proc != nil {
			srv.Stop(10 * time.Second)
		}
	}
}

// Counts sums, per kind, the kills the suite dealt and the exits it did not
// cause.
func (s *System) Counts() (kills, exits map[string]int) {
	kills, exits = map[string]int{}, map[string]int{}
	procs := s.components()
	for _, srv := range s.Servers {
		procs = append(procs, srv.Proc)
	}
	for _, p := range procs {
		k, e := p.Counts()
		kills[p.Kind] += k
		exits[p.Kind] += e
	}
	return kills, exits
}

// ServerNamed returns the server called name.
func (s *System) ServerNamed(name string) (*Server, error) {
	for _, srv := range s.Servers {
		if srv.ServerName == name {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("%w: %q", ErrNoServer, name)
}
