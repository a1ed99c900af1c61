package conn_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestMain(m *testing.M) { testnats.VerifyTestMain(m) }

// TestDial: a role connects, says it is in-process when it is, reports a
// publish the server denies in its log, and Close drains.
func TestDial(t *testing.T) {
	env := testnats.Start(t, nil)
	var logs testnats.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	c, err := conn.Dial(config.NATS{User: "worker", Password: "local-worker"}, "worker", log, env.Server.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "server=in-process") || !strings.Contains(logs.String(), `auth="user worker"`) {
		t.Fatalf("connect log: %s", logs.String())
	}
	env.ExpectViolation("worker", `Permissions Violation for Publish to "batches.high.x"`)
	if err := c.Publish("batches.high.x", nil); err != nil { // a worker may not enqueue
		t.Fatal(err)
	}
	testnats.Eventually(t, 5*time.Second, "the denial logged", func() bool {
		return strings.Contains(logs.String(), "Permissions Violation for Publish")
	})
	c.Close()
	if !c.IsClosed() {
		t.Fatal("Close returned before the connection closed")
	}

}
