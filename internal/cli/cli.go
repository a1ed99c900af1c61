// Package cli holds what every tickflow command does the same way:
// connecting as a role with logged connection events, draining on the way
// out, usage text with the environment variables, and the exit code.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/streams"
)

// Main runs run and exits non-zero with its error; -h exits 0.
func Main(name string, run func() error) {
	if err := run(); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Conn is a connection whose Close drains it and waits until it is closed,
// then stops the embedded server the connection was made to, if any.
type Conn struct {
	*nats.Conn
	closed chan struct{}
	log    *slog.Logger
	server *embedded.Server
}

// Connect connects as n says, taking role's inbox when the identity has no
// user name (an nkey or creds file), and logs what the connection does in
// the background: a publish the server denied is reported only there. With
// e enabled it first starts a nats-server in this process from e's config
// file and connects to it in-process, as the same user.
func Connect(n config.NATS, e config.Embedded, role string, log *slog.Logger, extra ...nats.Option) (*Conn, error) {
	creds := streams.Credentials{
		URL: n.ServerURL(), User: n.User, Password: n.Password,
		Creds: n.Creds, NKey: n.NKey, Name: n.Name,
	}
	if creds.User == "" {
		creds.InboxPrefix = streams.InboxPrefix(role)
	}
	c := &Conn{closed: make(chan struct{}), log: log}
	opts := append(Handlers(log, c.closed), extra...)
	if e.Enabled {
		srv, err := embedded.Start(embedded.Options{ConfigFile: e.ConfigFile, DataDir: e.DataDir, Listen: e.Listen})
		if err != nil {
			return nil, err
		}
		c.server = srv
		opts = append(opts, srv.InProcess())
		log.Info("nats-server started", "url", srv.URL(), "data_dir", e.DataDir, "config", e.ConfigFile)
	}
	nc, err := streams.Connect(creds, opts...)
	if err != nil {
		if c.server != nil {
			c.server.Close()
		}
		return nil, err
	}
	c.Conn = nc
	log.Info("nats connected", "server", nc.ConnectedUrlRedacted(), "server_name", nc.ConnectedServerName(), "auth", Identity(n))
	return c, nil
}

// Handlers log a connection's errors, disconnects and reconnects (server
// addresses redacted: a URL may carry a password) and close closed when the
// connection is done.
func Handlers(log *slog.Logger, closed chan<- struct{}) []nats.Option {
	return []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Error("nats error", "subject", sub.Subject, "err", err)
				return
			}
			log.Error("nats error", "err", err)
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
	}
}

// Close flushes what the connection still has to send (the last acks and
// callbacks) and closes it, waiting until it is closed.
func (c *Conn) Close() {
	if err := c.Conn.Drain(); err != nil {
		c.log.Warn("nats drain", "err", err)
		c.Conn.Close()
	}
	<-c.closed
	if c.server != nil {
		c.server.Close()
	}
}

// Identity says how n authenticates, without the secret.
func Identity(n config.NATS) string {
	switch {
	case n.User != "":
		return "user " + n.User
	case n.Creds != "":
		return "creds " + n.Creds
	case n.NKey != "":
		return "nkey " + n.NKey
	}
	return "anonymous"
}

// Usage prints a synopsis, the flags and the environment variables cfg reads.
func Usage(fs *flag.FlagSet, synopsis string, cfg config.Component) func() {
	return func() {
		out := fs.Output()
		fmt.Fprintf(out, "%s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintf(out, "\nEnvironment (flags win over it, it wins over the config file):\n  TICKFLOW_CONFIG  -config\n")
		for _, v := range config.EnvVars(cfg) {
			fmt.Fprintln(out, " ", v)
		}
	}
}

// Load reads the command line into cfg (the -config file, the environment,
// then the flags, see config.Parse) with a usage text starting with
// synopsis, and builds the logger that log configures.
func Load(synopsis string, cfg config.Component, log *config.Log) (*slog.Logger, error) {
	flag.CommandLine.Usage = Usage(flag.CommandLine, synopsis, cfg)
	if err := config.Parse(flag.CommandLine, os.Args[1:], cfg, os.Getenv); err != nil {
		return nil, err
	}
	return log.Logger(os.Stderr)
}
