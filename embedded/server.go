// Package embedded runs a real nats-server in-process, configured from the
// project's nats.conf, so one command runs the whole system on one machine
// and every test runs against the real server.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ErrNotReady is returned when the server did not become ready in time.
var ErrNotReady = errors.New("embedded: server not ready")

// Options configure an embedded server. The zero value of each field means its default.
type Options struct {
	// ConfigFile is the nats.conf to load. One of ConfigFile and Config is
	// required.
	ConfigFile string
	// Config is the text of a nats.conf, instead of a file (e.g.
	// tickflow.NATSConfig, the project's own).
	Config string
	// DataDir is the JetStream store directory, overriding the file's
	// store_dir. Required. The server holds an exclusive lock on it (the
	// file LockFile in it) until Close: a second Start on the same dir fails
	// with ErrDataDirInUse.
	DataDir string
	// Listen is the host:port to listen on, overriding the file's listen.
	// Port 0 or -1 picks a free port. Default: what the file says.
	Listen string
	// DontListen runs without any TCP listener: in-process connections only.
	DontListen bool
	// ServerName overrides the file's server_name. Default: "tickflow".
	ServerName string
	// ReadyTimeout bounds the wait for the server to accept connections. Default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines (notices at info, debug and
	// trace at debug). Nil: the server logs nothing.
	Logger *slog.Logger
	// Configure, when set, may adjust the parsed options before start (tests
	// use it to form clusters).
	Configure func(*server.Options)
	// SkipJetStreamCheck returns once the server accepts connections,
	// without waiting for JetStream to be healthy: a clustered server's
	// JetStream is healthy only once its peers are up too.
	SkipJetStreamCheck bool
}

// Server is a running embedded nats-server.
type Server struct {
	*server.Server
	lock  *dirLock
	close sync.Once
}

// Start loads the config file, locks the data dir, starts the server and
// waits until it accepts connections and JetStream is healthy. A data dir
// another server holds gives an error matching ErrDataDirInUse that names
// the dir and the process holding it.
func Start(opts Options) (*Server, error) {
	if (opts.ConfigFile == "") == (opts.Config == "") {
		return nil, errors.New("embedded: one of a config file (e.g. nats.conf) and a config text is required")
	}
	if opts.DataDir == "" {
		return nil, errors.New("embedded: a data dir is required for the JetStream file store")
	}
	// The dir first: a second system on it is refused for that, whatever
	// its port.
	lock, err := lockDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	so, err := loadOptions(opts)
	if err != nil {
		lock.release()
		return nil, err
	}
	s, err := start(opts, so)
	if err != nil {
		lock.release()
		return nil, err
	}
	srv := &Server{Server: s, lock: lock}
	lock.describe(srv.URL())
	return srv, nil
}

// loadOptions turns opts into the server's options.
func loadOptions(opts Options) (*server.Options, error) {
	so := &server.Options{}
	if opts.Config != "" {
		if err := so.ProcessConfigString(opts.Config); err != nil {
			return nil, fmt.Errorf("embedded: load the config text: %w", err)
		}
	} else if err := so.ProcessConfigFile(opts.ConfigFile); err != nil {
		return nil, fmt.Errorf("embedded: load %s: %w", opts.ConfigFile, err)
	}
	so.StoreDir = opts.DataDir
	so.JetStream = true
	so.NoSigs = true
	so.ServerName = opts.ServerName
	if so.ServerName == "" {
		so.ServerName = "tickflow"
	}
	if opts.DontListen {
		so.DontListen = true
	} else if opts.Listen != "" {
		host, port, err := net.SplitHostPort(opts.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded: listen %q: expected host:port: %w", opts.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("embedded: listen %q: port must be a number", opts.Listen)
		}
		if p == 0 {
			p = server.RANDOM_PORT
		} else if ln, err := net.Listen("tcp", opts.Listen); err != nil {
			// The server would only log this; say it where it is seen.
			return nil, fmt.Errorf("embedded: cannot listen on %s (is another nats-server running? pick another with -listen): %w", opts.Listen, err)
		} else {
			_ = ln.Close()
		}
		so.Host, so.Port = host, p
	}
	so.NoLog = opts.Logger == nil
	if opts.Configure != nil {
		opts.Configure(so)
	}
	return so, nil
}

// start runs the server of so and waits until it is ready.
func start(opts Options, so *server.Options) (*server.Server, error) {
	s, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if opts.Logger != nil {
		s.SetLoggerV2(&logAdapter{l: opts.Logger.With("component", "nats-server")}, true, false, false)
	}
	s.Start()
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	if !s.ReadyForConnections(timeout) {
		closed := closedListeners(s, so)
		s.Shutdown()
		return nil, fmt.Errorf("%w after %s%s", ErrNotReady, timeout, closed)
	}
	deadline := time.Now().Add(timeout)
	for !opts.SkipJetStreamCheck {
		h := s.Healthz(&server.HealthzOptions{JSEnabledOnly: true})
		if h.Status == "ok" {
			break
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("%w: jetstream %s: %s", ErrNotReady, h.Status, h.Error)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s, nil
}

// closedListeners names the listeners s was told to open and has not, the
// reason it is not ready: nats-server opens each once and only logs a
// failure (a port taken meanwhile).
func closedListeners(s *server.Server, so *server.Options) string {
	var out []string
	if !so.DontListen && s.Addr() == nil {
		out = append(out, fmt.Sprintf("client listener on %s:%d not open", so.Host, so.Port))
	}
	if so.Cluster.Port != 0 && s.ClusterAddr() == nil {
		out = append(out, fmt.Sprintf("cluster listener on %s:%d not open (port taken?)", so.Cluster.Host, so.Cluster.Port))
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, ", ")
}

// InProcess returns the connect option that connects to this server without
// a network socket. Each connection has a send buffer, as a socket has
// (pipeConn), so that its publishers do not wait on the server's read loop.
func (s *Server) InProcess() nats.Option { return nats.InProcessServer(bufferedPipes{s.Server}) }

// URL is the client URL, empty when the server does not listen.
func (s *Server) URL() string {
	if s.Server.Addr() == nil {
		return ""
	}
	return s.ClientURL()
}

// Run serves until ctx is done, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	<-ctx.Done()
	s.Close()
	return nil
}

// Close shuts the server down, waits until it has, and releases the data
// dir. It may be called more than once.
func (s *Server) Close() {
	s.close.Do(func() {
		s.Shutdown()
		s.WaitForShutdown()
		s.lock.release()
	})
}

type logAdapter struct{ l *slog.Logger }

func (a *logAdapter) Noticef(format string, v ...any) { a.l.Info(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a *logAdapter) Tracef(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
