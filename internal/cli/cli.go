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
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/embedded"
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
	dialed *conn.Conn
	server *embedded.Server
}

// Connect connects as n says with conn.Dial. With e enabled it first starts
// a nats-server in this process from e's config file and connects to it
// in-process, as the same user.
func Connect(n config.NATS, e config.Embedded, role string, log *slog.Logger, extra ...nats.Option) (*Conn, error) {
	c := &Conn{}
	if e.Enabled {
		srv, err := embedded.Start(embedded.Options{ConfigFile: e.ConfigFile, DataDir: e.DataDir, Listen: e.Listen})
		if err != nil {
			return nil, err
		}
		c.server = srv
		extra = append(extra, srv.InProcess())
		log.Info("nats-server started", "url", srv.URL(), "data_dir", e.DataDir, "config", e.ConfigFile)
	}
	nc, err := conn.Dial(n, role, log, extra...)
	if err != nil {
		if c.server != nil {
			c.server.Close()
		}
		return nil, err
	}
	c.Conn, c.dialed = nc.Conn, nc
	return c, nil
}

// Close drains the connection, then stops the embedded server, if any.
func (c *Conn) Close() {
	c.dialed.Close()
	if c.server != nil {
		c.server.Close()
	}
}

// Identity says how n authenticates, without the secret.
func Identity(n config.NATS) string { return conn.Identity(n) }

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
