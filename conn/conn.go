// Package conn connects a tickflow component to NATS as one role of
// nats.conf, the way the bundled commands do: the role's own inbox prefix
// (replies reach a role only there), reconnects forever, every connection
// event logged — a publish the server denies is reported only
// asynchronously, so it is logged, never lost — and Close drains what is
// still to be sent before it returns. Use it for your own workers.
package conn

import (
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/internal/streams"
)

// Conn is a connection whose Close drains it and waits until it is closed.
type Conn struct {
	*nats.Conn
	closed chan struct{}
	log    *slog.Logger
}

// Dial connects as n says (URL, user and password, creds or nkey file),
// taking role's inbox prefix when the identity has no user name (a creds
// or nkey file), and logs the connection's events to log. extra options
// come last (e.g. an embedded server's InProcess). An identity the server
// refuses gives an error that says to check the credentials.
func Dial(n config.NATS, role string, log *slog.Logger, extra ...nats.Option) (*Conn, error) {
	creds := streams.Credentials{
		URL: n.ServerURL(), User: n.User, Password: n.Password,
		Creds: n.Creds, NKey: n.NKey, Name: n.Name,
	}
	if creds.User == "" {
		creds.InboxPrefix = streams.InboxPrefix(role)
	}
	c := &Conn{closed: make(chan struct{}), log: log}
	nc, err := streams.Connect(creds, append(Handlers(log, c.closed), extra...)...)
	if err != nil {
		return nil, err
	}
	c.Conn = nc
	server := nc.ConnectedUrlRedacted()
	if nc.ConnectedAddr() == "pipe" || server == "" {
		server = "in-process"
	}
	log.Info("nats connected", "server", server, "server_name", nc.ConnectedServerName(), "auth", Identity(n))
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

// Close flushes what the connection still has to send (the last replies,
// acknowledgements and callbacks) and closes it, waiting until it is closed.
func (c *Conn) Close() {
	if err := c.Conn.Drain(); err != nil {
		c.log.Warn("nats drain", "err", err)
		c.Conn.Close()
	}
	<-c.closed
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
