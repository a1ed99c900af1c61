package cli_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/internal/cli"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestMain(m *testing.M) { testnats.VerifyTestMain(m) }

// TestConnectEmbedded: a command with -embedded starts its own server from
// nats.conf, connects in-process as its user, and stops it on Close.
func TestConnectEmbedded(t *testing.T) {
	n := config.DefaultNATS()
	n.User, n.Password = "admin", testnats.Password("admin")
	e := config.Embedded{Enabled: true, ConfigFile: testnats.ConfigPath(t), DataDir: t.TempDir(), Listen: "127.0.0.1:0"}
	c, err := cli.Connect(n, e, "admin", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(c.Conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := streams.Provision(ctx, js, streams.DefaultSettings(), "pay"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if c.IsConnected() {
		t.Fatal("still connected after Close")
	}
}
