package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// Connection holds the global flags that say how to reach NATS and as whom.
// Each setting is taken, as the nats tool takes it, from its flag, else its
// environment variable, else the nats context (--context, $NATS_CONTEXT,
// else the selected one), else its default.
type Connection struct {
	Server   string        `short:"s" placeholder:"URL" help:"NATS server URLs, comma-separated ($$NATS_URL; default nats://127.0.0.1:4222)."`
	User     string        `placeholder:"USER" help:"NATS user, also the tickflow user ($$NATS_USER)."`
	Password string        `placeholder:"PASSWORD" help:"The user's password ($$NATS_PASSWORD); env://VAR and file://PATH are read."`
	Creds    string        `placeholder:"FILE" help:"NATS creds file ($$NATS_CREDS); name the tickflow user with --as."`
	NKey     string        `name:"nkey" placeholder:"FILE" help:"NATS nkey seed file ($$NATS_NKEY); name the tickflow user with --as."`
	Context  string        `placeholder:"NAME" help:"nats context to read the settings from ($$NATS_CONTEXT; default the selected one)."`
	As       string        `placeholder:"USER" help:"The tickflow user to speak as ($$TICKFLOW_AS; default the NATS user)."`
	Timeout  time.Duration `placeholder:"DURATION" help:"How long each request may take ($$NATS_TIMEOUT; default 5s)."`
}

// settings is where a connection goes, resolved from flags, environment
// and context, with the source of each setting for error messages.
type settings struct {
	nats    config.NATS
	as      string
	tls     []nats.Option
	timeout time.Duration
	from    map[string]string // setting → "--server", "NATS_URL", `context "x"`
}

// resolve works out the settings: a flag, else its environment variable,
// else the context's value.
func (c *Connection) resolve(getenv func(string) string) (*settings, error) {
	name := c.Context
	if name == "" {
		name = getenv("NATS_CONTEXT")
	}
	nctx, err := loadNATSContext(name, getenv)
	if err != nil {
		return nil, err
	}
	s := &settings{from: map[string]string{}}
	pick := func(setting, flag, env, fromContext string) string {
		switch {
		case flag != "":
			s.from[setting] = "--" + setting
			return flag
		case getenv(env) != "":
			s.from[setting] = env
			return getenv(env)
		case fromContext != "":
			s.from[setting] = fmt.Sprintf("nats context %q", nctx.Name)
			return fromContext
		}
		return ""
	}
	var cx natsContext
	if nctx != nil {
		cx = *nctx
	}
	s.nats = config.NATS{
		URL:      pick("server", c.Server, "NATS_URL", cx.URL),
		User:     pick("user", c.User, "NATS_USER", cx.User),
		Password: pick("password", c.Password, "NATS_PASSWORD", cx.Password),
		Creds:    pick("creds", c.Creds, "NATS_CREDS", cx.Creds),
		NKey:     pick("nkey", c.NKey, "NATS_NKEY", cx.NKey),
		Name:     "tickflow-cli",
	}
	if s.nats.Password, err = resolveSecret(s.nats.Password, getenv); err != nil {
		return nil, err
	}
	if err := s.nats.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w (%s)", errSettings, err, s.sources())
	}
	s.as = pick("as", c.As, "TICKFLOW_AS", "")
	if s.as == "" {
		s.as = s.nats.User
	}
	if s.nats.User != "" && s.as != s.nats.User {
		return nil, fmt.Errorf("%w: speaking as %q (%s) over a connection made as user %q: nats.conf lets a user publish only under its own name, and authz answers it only there; --as is for creds and nkey connections",
			errSettings, logging.Capped(s.as), s.from["as"], s.nats.User)
	}
	if s.as == "" {
		return nil, fmt.Errorf("%w: no tickflow user: give --user (or NATS_USER, or a nats context with a user), or, connecting with a creds or nkey file, --as", errSettings)
	}
	if err := pipeline.ValidateDomain(s.as); err != nil {
		return nil, fmt.Errorf("%w: tickflow user %q: %w", errSettings, logging.Capped(s.as), err)
	}
	if cx.Cert != "" && cx.Key != "" {
		s.tls = append(s.tls, nats.ClientCert(cx.Cert, cx.Key))
	}
	if cx.CA != "" {
		s.tls = append(s.tls, nats.RootCAs(cx.CA))
	}
	if cx.TLSFirst {
		s.tls = append(s.tls, nats.TLSHandshakeFirst())
	}
	s.timeout = c.Timeout
	if s.timeout == 0 {
		if v := getenv("NATS_TIMEOUT"); v != "" {
			if s.timeout, err = time.ParseDuration(v); err != nil || s.timeout <= 0 {
				return nil, fmt.Errorf("%w: NATS_TIMEOUT %q: expected a positive duration such as 5s", errSettings, v)
			}
		}
	}
	if s.timeout < 0 {
		return nil, fmt.Errorf("%w: --timeout %v: expected a positive duration such as 5s", errSettings, s.timeout)
	}
	return s, nil
}

// sources says where the settings came from, e.g. `server from NATS_URL,
// user from nats context "local"`.
func (s *settings) sources() string {
	var parts []string
	for _, k := range []string{"server", "user", "password", "creds", "nkey", "as"} {
		if f, ok := s.from[k]; ok {
			parts = append(parts, k+" from "+f)
		}
	}
	if len(parts) == 0 {
		return "no settings given: the defaults"
	}
	return strings.Join(parts, ", ")
}

// session is a connection and the client speaking over it.
type session struct {
	conn   *conn.Conn
	client *client.Client
}

// dial connects as the settings say. Connection events worth a warning
// (a disconnect, a publish the server denied) go to stderr.
func dial(s *settings, stderr io.Writer) (*session, error) {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	nc, err := conn.Dial(s.nats, s.as, log, s.tls...)
	if err != nil {
		return nil, &connectError{server: streams.RedactURL(s.nats.ServerURL()), as: s.as, sources: s.sources(), err: err}
	}
	cl, err := client.New(nc.Conn, s.as, client.Config{Timeout: s.timeout})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("%w: %w", errSettings, err)
	}
	return &session{conn: nc, client: cl}, nil
}

// connectError is a connection that could not be made.
type connectError struct {
	server, as, sources string
	err                 error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("connect to %s as %s (%s): %v", e.server, e.as, e.sources, e.err)
}

func (e *connectError) Unwrap() error { return e.err }

// close drains the connection.
func (s *session) close() { s.conn.Close() }

// withSession connects, runs f with the client and closes the connection.
func withSession(ctx context.Context, g *Globals, env *Env, f func(ctx context.Context, c *client.Client) error) error {
	s, err := g.resolve(env.Getenv)
	if err != nil {
		return err
	}
	sess, err := dial(s, env.Stderr)
	if err != nil {
		return err
	}
	defer sess.close()
	return f(ctx, sess.client)
}

// show runs one request in a session and prints its reply: as JSON with
// --json, else as human writes it.
func show[R any](ctx context.Context, g *Globals, env *Env, call func(context.Context, *client.Client) (*R, error), human func(io.Writer, *R) error) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := call(ctx, cl)
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error { return human(w, rep) })
	})
}
