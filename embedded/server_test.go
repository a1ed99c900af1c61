package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

func connect(t *testing.T, _ *embedded.Server, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := streams.Connect(testnats.Creds("admin"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestRestartKeepsData: the file store survives a restart on the same dir.
func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	opts := embedded.Options{ConfigFile: testnats.ConfigPath(t), DataDir: dir, Listen: "127.0.0.1:0"}
	s, err := embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	if s.URL() == "" {
		t.Fatal("a listening server has no URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, _ := jetstream.New(connect(t, s, nats.InProcessServer(s.Server)))
	if err := streams.Provision(ctx, js, streams.DefaultSettings(), "pay"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, streams.DLQSubject("pay"), []byte("kept")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = embedded.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	js, _ = jetstream.New(connect(t, s, nats.InProcessServer(s.Server)))
	st, err := js.Stream(ctx, streams.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 1 {
		t.Fatalf("DLQ has %d messages after a restart, want 1", n)
	}
}

// TestRunStopsOnCancel: Run returns once its context ends, and the server is down.
func TestRunStopsOnCancel(t *testing.T) {
	s, err := embedded.Start(embedded.Options{ConfigFile: testnats.ConfigPath(t), DataDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.Running() {
		t.Fatal("server still running")
	}
}

func TestStartErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	bad := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(bad, []byte("listen: {{{"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts embedded.Options
		want string
	}{
		{name: "no config", opts: embedded.Options{DataDir: t.TempDir()}, want: "one of a config file (e.g. nats.conf) and a config text is required"},
		{name: "both configs", opts: embedded.Options{ConfigFile: testnats.ConfigPath(t), Config: "port: 4222", DataDir: t.TempDir()}, want: "one of a config file"},
		{name: "malformed config text", opts: embedded.Options{Config: "listen: [", DataDir: t.TempDir()}, want: "load the config text"},
		{name: "no data dir", opts: embedded.Options{ConfigFile: testnats.ConfigPath(t)}, want: "data dir is required"},
		{name: "missing config", opts: embedded.Options{ConfigFile: "/nonexistent/nats.conf", DataDir: t.TempDir()}, want: "load /nonexistent/nats.conf"},
		{name: "malformed config", opts: embedded.Options{ConfigFile: bad, DataDir: t.TempDir()}, want: "load " + bad},
		{name: "port taken", opts: embedded.Options{ConfigFile: testnats.ConfigPath(t), DataDir: t.TempDir(), Listen: busy.Addr().String()}, want: "is another nats-server running"},
		{name: "bad listen", opts: embedded.Options{ConfigFile: testnats.ConfigPath(t), DataDir: t.TempDir(), Listen: "nowhere"}, want: "expected host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := embedded.Start(tt.opts)
			if err == nil {
				s.Close()
				t.Fatal("want an error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

// TestNotReadyNamesClosedListener: a server whose route port was taken
// before it opened its route listener never becomes ready; the error says
// which listener, not just that it timed out.
func TestNotReadyNamesClosedListener(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = taken.Close() })
	port := taken.Addr().(*net.TCPAddr).Port
	s, err := embedded.Start(embedded.Options{
		ConfigFile: testnats.ConfigPath(t), DataDir: t.TempDir(), Listen: "127.0.0.1:0",
		ReadyTimeout: 300 * time.Millisecond, SkipJetStreamCheck: true,
		Configure: func(o *server.Options) {
			o.Cluster = server.ClusterOpts{Name: "tickflow", Host: "127.0.0.1", Port: port}
			o.Routes = server.RoutesFromStr(fmt.Sprintf("nats-route://127.0.0.1:%d", port))
		},
	})
	if err == nil {
		s.Close()
		t.Fatal("a server without its route listener is ready")
	}
	want := fmt.Sprintf("cluster listener on 127.0.0.1:%d not open", port)
	if !errors.Is(err, embedded.ErrNotReady) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not say %q", err, want)
	}
}

// TestFreePort: the ports lie below the ephemeral range, and are free.
func TestFreePort(t *testing.T) {
	for range 20 {
		p, err := embedded.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if p < 10000 || p >= 32768 {
			t.Fatalf("port %d is outside [10000, 32768)", p)
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		if err := ln.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestInProcessDeliversWhatCloseLeft: a connection through InProcess (with
// its send buffer) carries publishes and requests, and what a client
// published just before Close, unflushed, still reaches the server, as it
// would over a socket.
// startSubscribed starts a server from the project's nats.conf, without a
// listener, and subscribes to subjects on an in-process connection.
func startSubscribed(t *testing.T, subjects string) (*embedded.Server, *nats.Conn, *nats.Subscription) {
	t.Helper()
	s, err := embedded.Start(embedded.Options{ConfigFile: testnats.ConfigPath(t), DataDir: t.TempDir(), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	nc := connect(t, s, s.InProcess())
	got, err := nc.SubscribeSync(subjects)
	if err != nil {
		t.Fatal(err)
	}
	return s, nc, got
}

// receiveInOrder reads n messages from got, the i-th on prefix.i.
func receiveInOrder(t *testing.T, got *nats.Subscription, prefix string, n int) {
	t.Helper()
	for i := range n {
		m, err := got.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("message %d of %d: %v", i, n, err)
		}
		if want := fmt.Sprintf("%s.%d", prefix, i); m.Subject != want {
			t.Fatalf("message %d is %s, want %s", i, m.Subject, want)
		}
	}
}

func TestInProcessDeliversWhatCloseLeft(t *testing.T) {
	s, sub, got := startSubscribed(t, "in.>")
	if _, err := sub.Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(m.Data) }); err != nil {
		t.Fatal(err)
	}
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	pub, err := streams.Connect(testnats.Creds("admin"), s.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	if m, err := pub.Request("echo", []byte("ping"), 10*time.Second); err != nil || string(m.Data) != "ping" {
		t.Fatalf("request through the buffered connection: %v, %v", m, err)
	}
	const n = 5000
	for i := range n {
		if err := pub.Publish(fmt.Sprintf("in.%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	pub.Close()
	receiveInOrder(t, got, "in", n) // every one published before Close
}

// TestShippedConfigCachesNoMatches: the project's nats.conf turns the
// server's cache of subject matches off, so that publishes to subjects used
// once (KV keys, acks, reply inboxes) do not all wait on the account's lock
// to fill a cache they never hit; messages are routed as before.
func TestShippedConfigCachesNoMatches(t *testing.T) {
	s, nc, got := startSubscribed(t, "once.>")
	const n = 200
	for i := range n {
		if err := nc.Publish(fmt.Sprintf("once.%d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	receiveInOrder(t, got, "once", n)
	sz, err := s.Server.Subsz(&server.SubszOptions{Subscriptions: true})
	if err != nil {
		t.Fatal(err)
	}
	if sz.NumCache != 0 {
		t.Fatalf("the server cached %d subject matches after %d publishes to distinct subjects: nats.conf should set disable_sublist_cache", sz.NumCache, n)
	}
}
