package dashboard

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/client"
)

//go:embed static
var assets embed.FS

// Defaults of Config: New puts them in the fields left zero.
const (
	// DefaultIdleTimeout is the default of Config.IdleTimeout.
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultMaxLifetime is the default of Config.MaxLifetime.
	DefaultMaxLifetime = 12 * time.Hour
	// DefaultMaxSessions is the default of Config.MaxSessions.
	DefaultMaxSessions = 64
	// DefaultMaxSessionsPerUser is the default of Config.MaxSessionsPerUser.
	DefaultMaxSessionsPerUser = 4
	// DefaultMaxLogins is the default of Config.MaxLogins.
	DefaultMaxLogins = 8
	// DefaultMaxLoginsPerClient is the default of Config.MaxLoginsPerClient
	// (MaxLogins when that is smaller).
	DefaultMaxLoginsPerClient = 2
	// DefaultRefresh is the default of Config.Refresh.
	DefaultRefresh = 2 * time.Second
)

// Config configures a Server. The zero value of each field means its
// default, except Dial, which is required.
type Config struct {
	// Dial connects to NATS as user with password, with the user's inbox
	// prefix (the connection it makes sets it): the session's every request goes
	// through this connection, so the user's own rights apply. An error
	// refuses the login. Required.
	Dial func(user, password string) (*nats.Conn, error)
	// Timeout bounds each authz request. Default client.DefaultTimeout.
	Timeout time.Duration
	// IdleTimeout ends a session left unused this long, closing its
	// connection. Default DefaultIdleTimeout (30m).
	IdleTimeout time.Duration
	// MaxLifetime ends a session this long after its login, however busy
	// (an open page keeps a session in use). Default DefaultMaxLifetime
	// (12h).
	MaxLifetime time.Duration
	// MaxSessions bounds the sessions open at once, each holding a NATS
	// connection; a login past it is refused until one ends. Default
	// DefaultMaxSessions (64).
	MaxSessions int
	// MaxSessionsPerUser bounds one user's sessions: a login past it ends
	// the user's oldest session. Default DefaultMaxSessionsPerUser (4).
	MaxSessionsPerUser int
	// MaxLogins bounds the login attempts under way at once (each a NATS
	// connection whose password the server checks against a bcrypt hash);
	// one past it is answered 503 at once. Default DefaultMaxLogins (8).
	MaxLogins int
	// MaxLoginsPerClient bounds the login attempts of one client
	// (ClientAddr) under way at once, so that one client cannot take the
	// places of MaxLogins that another's login needs; one past it is
	// answered 503 at once. At most MaxLogins. Default
	// DefaultMaxLoginsPerClient (2).
	MaxLoginsPerClient int
	// ClientAddr names the client a request comes from. Its failed logins
	// make it wait before it may try again (429 meanwhile): after 3
	// failures, 1s, doubling up to 5m; failures at one account count the
	// same way for the account, from whatever client, except for a login
	// from a client the account logged in from before. A good login
	// forgives its client's failures at its account only. Default: the
	// host of the request's remote address, for IPv6 its /64. Behind a
	// reverse proxy that is the proxy, shared by every client: return the
	// address the proxy forwards (only when the dashboard cannot be
	// reached but through the proxy).
	ClientAddr func(r *http.Request) string
	// PublicURL, when set, is the https origin the browser uses to reach
	// the dashboard (https://host[:port], no path), as where a reverse
	// proxy terminates TLS: the session cookie is then Secure and named
	// __Host-tickflow_session, and a POST's Origin must be this origin.
	// Unset, the cookie is Secure only for a request that came over TLS to
	// the dashboard itself, and an Origin must name the request's Host.
	//
	// Its host is one the dashboard answers to (see Hosts).
	PublicURL string
	// Hosts names the hosts the dashboard answers to besides the address
	// a request reached it at and localhost, at that address's port, and
	// PublicURL's host: each a name or IP address as a browser writes it
	// in the Host header, with a port (dash.lan:8090) or without one, for
	// any port (dash.lan). A request for any other host is answered 421
	// before anything else, so that a page of a name that an attacker's
	// DNS points at the dashboard (DNS rebinding) cannot use it.
	Hosts []string
	// Refresh is how often an open page reloads its data. Default
	// DefaultRefresh (2s).
	Refresh time.Duration
	// Logger receives the dashboard's logs. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Server serves the dashboard. It is safe for concurrent use.
type Server struct {
	cfg      Config
	log      *slog.Logger
	sessions *sessions
	logins   *loginGate
	handler  http.Handler
	static   fs.FS
	// origin is PublicURL's origin, "" when unset; cookie is the session
	// cookie's name.
	origin, cookie string
	// hosts is Hosts parsed; public is PublicURL's host as the browser
	// writes it in Host, with its port where not the default.
	hosts  []hostEntry
	public string
}

// New returns a server; it listens nowhere until Serve or Run. Errors
// match ErrConfig.
func New(cfg Config) (*Server, error) {
	if cfg.Dial == nil {
		return nil, fmt.Errorf("%w: Dial is required", ErrConfig)
	}
	if cfg.Timeout < 0 || cfg.IdleTimeout < 0 || cfg.MaxLifetime < 0 || cfg.Refresh < 0 ||
		cfg.MaxSessions < 0 || cfg.MaxSessionsPerUser < 0 || cfg.MaxLogins < 0 || cfg.MaxLoginsPerClient < 0 {
		return nil, fmt.Errorf("%w: durations and bounds must not be negative", ErrConfig)
	}
	origin, err := publicOrigin(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	hosts, err := parseHosts(cfg.Hosts)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = client.DefaultTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxLifetime == 0 {
		cfg.MaxLifetime = DefaultMaxLifetime
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxSessionsPerUser == 0 {
		cfg.MaxSessionsPerUser = DefaultMaxSessionsPerUser
	}
	if cfg.MaxLogins == 0 {
		cfg.MaxLogins = DefaultMaxLogins
	}
	if cfg.MaxLoginsPerClient == 0 {
		cfg.MaxLoginsPerClient = min(DefaultMaxLoginsPerClient, cfg.MaxLogins)
	}
	if cfg.MaxLoginsPerClient > cfg.MaxLogins {
		return nil, fmt.Errorf("%w: MaxLoginsPerClient %d is over MaxLogins %d: one client's share must fit in the whole", ErrConfig, cfg.MaxLoginsPerClient, cfg.MaxLogins)
	}
	if cfg.ClientAddr == nil {
		cfg.ClientAddr = remoteHost
	}
	if cfg.Refresh == 0 {
		cfg.Refresh = DefaultRefresh
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	static, err := fs.Sub(assets, "static")
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger.With("component", "dashboard"), static: static, origin: origin,
		cookie: cookieName, hosts: hosts, public: strings.TrimPrefix(origin, "https://"),
		sessions: newSessions(sessionLimits{max: cfg.MaxSessions, perUser: cfg.MaxSessionsPerUser, idle: cfg.IdleTimeout, lifetime: cfg.MaxLifetime}, cfg.Now),
		logins:   newLoginGate(cfg.MaxLogins, cfg.MaxLoginsPerClient, cfg.Now)}
	if origin != "" {
		s.cookie = secureCookieName
	}
	s.handler = s.routes()
	return s, nil
}

// Handler is the dashboard as an http.Handler, for a server of the
// caller's (tests, or another mux). Sessions end with Close. The address
// a request reached is the one its server puts in the request's context
// (http.LocalAddrContextKey, as net/http's does); without it only Hosts
// and PublicURL's host are answered.
func (s *Server) Handler() http.Handler { return s.handler }

// Close ends every session and closes its connection.
func (s *Server) Close() { s.sessions.closeAll() }

// Run listens on addr and serves until ctx is done (Serve).
func (s *Server) Run(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then stops taking requests, waits
// up to 5s for those under way, closes every session and returns. It
// closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	sweep := time.NewTicker(time.Minute)
	defer sweep.Stop()
	defer s.Close()
	s.log.Info("dashboard serving", "url", "http://"+ln.Addr().String(), "public_url", s.origin)
	for {
		select {
		case err := <-done:
			return fmt.Errorf("dashboard: serve: %w", err)
		case <-sweep.C:
			s.sessions.sweep()
			s.logins.sweep()
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := hs.Shutdown(sctx); err != nil {
				s.log.Warn("dashboard requests cut short at shutdown", "err", err)
			}
			cancel()
			if err := <-done; !errors.Is(err, http.ErrServerClosed) {
				s.log.Warn("dashboard stopped with an error", "err", err)
			}
			s.log.Info("dashboard stopped")
			return nil
		}
	}
}
