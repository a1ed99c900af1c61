// Package testnats starts a real nats-server in the test process, loaded from
// the project's nats.conf, and hands out connections as its users.
package testnats

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"go.uber.org/goleak"
)

// Env is a running server and the settings its resources were provisioned with.
type Env struct {
	Server   *embedded.Server
	Settings streams.Settings
	Dir      string
	// violations holds the server's denials, checked when the test ends.
	violations *violationLog
}

// ConfigPath finds the repository's nats.conf from the test's working directory.
func ConfigPath(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		p := filepath.Join(dir, "nats.conf")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testnats: no go.mod above the test directory")
		}
		dir = parent
	}
}

// Option adjusts an Env before start.
type Option func(*embedded.Options, *streams.Settings)

// WithSettings replaces the stream settings.
func WithSettings(f func(*streams.Settings)) Option {
	return func(_ *embedded.Options, s *streams.Settings) { f(s) }
}

// WithUser adds a user with password Password(user) to the account of
// nats.conf's users, allowed to publish only publish and to receive only on
// its own inbox: a role nats.conf does not have, for tests of denials.
func WithUser(user string, publish ...string) Option {
	return func(eo *embedded.Options, _ *streams.Settings) {
		prev := eo.Configure
		eo.Configure = func(so *server.Options) {
			if prev != nil {
				prev(so)
			}
			var acc *server.Account
			for _, u := range so.Users {
				if u.Username == "ticker" {
					acc = u.Account
				}
			}
			so.Users = append(so.Users, &server.User{Username: user, Password: Password(user), Account: acc,
				Permissions: &server.Permissions{
					Publish:   &server.SubjectPermission{Allow: publish},
					Subscribe: &server.SubjectPermission{Allow: []string{streams.InboxPrefix(user) + ".>"}},
				}})
		}
	}
}

// Start runs a server from nats.conf with a temp store dir and no TCP
// listener, provisions every resource for domains as admin, and stops it
// when the test ends. The test fails then if the server denied one of
// tickflow's own roles anything it did not expect (ExpectViolation).
func Start(t testing.TB, domains []string, opts ...Option) *Env {
	t.Helper()
	dir := t.TempDir()
	eo := embedded.Options{ConfigFile: ConfigPath(t), DataDir: dir, DontListen: true}
	s := streams.DefaultSettings()
	for _, o := range opts {
		o(&eo, &s)
	}
	srv, err := embedded.Start(eo)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Server: srv, Settings: s, Dir: dir, violations: &violationLog{}}
	watchViolations(t, srv, env.violations)
	t.Cleanup(srv.Close)
	if domains != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := streams.Provision(ctx, env.JS(t, "admin"), s, domains...); err != nil {
			t.Fatal(err)
		}
	}
	return env
}

// Restart stops the server and starts it again on the same store.
func (e *Env) Restart(t testing.TB) {
	t.Helper()
	e.Server.Close()
	srv, err := embedded.Start(embedded.Options{ConfigFile: ConfigPath(t), DataDir: e.Dir, DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	e.Server = srv
	srv.SetLoggerV2(e.violations, false, false, false)
	t.Cleanup(srv.Close)
}

// Password is the local-default password of a nats.conf user.
func Password(user string) string { return "local-" + user }

// Creds returns the local-default credentials of user.
func Creds(user string) streams.Credentials {
	return streams.Credentials{User: user, Password: Password(user), Name: "test-" + user}
}

// Conn connects in-process as user and closes the connection when the test ends.
func (e *Env) Conn(t testing.TB, user string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := streams.Connect(Creds(user), append([]nats.Option{e.Server.InProcess()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JS returns a JetStream context connected as user.
func (e *Env) JS(t testing.TB, user string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(e.Conn(t, user))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Context returns a context that ends with the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// stopWait bounds Stopped: a component's Run returns within seconds of
// its context's end.
const stopWait = 60 * time.Second

// Stopped waits until done is closed: a component's Run has returned after
// its context was cancelled. A Run that does not return within a minute
// fails the test with every goroutine's stack, so that a shutdown that
// hangs shows where, long before the test binary's own timeout.
func Stopped(t testing.TB, what string, done <-chan struct{}) {
	t.Helper()
	select {
	case <-done:
		return
	case <-time.After(stopWait):
	}
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	t.Errorf("%s did not stop within %s; goroutines:\n%s", what, stopWait, buf)
}

// Eventually polls cond every few milliseconds until it holds or d passes.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// LastBlock is the index of the newest message block file of stream in
// e's store: the file store replaces a block it emptied with a new file,
// so the index grows with each replacement.
func (e *Env) LastBlock(t testing.TB, stream string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(e.Dir, "jetstream", "*", "streams", stream, "msgs", "*.blk"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no block files of %s under %s (%v)", stream, e.Dir, err)
	}
	last := 0
	for _, f := range files {
		i, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(f), ".blk"))
		if err != nil {
			t.Fatalf("block file %s: %v", f, err)
		}
		last = max(last, i)
	}
	return last
}

// Messages returns the data of every message in stream, in order, read as
// admin through js; a queue's keeper (streams.IsKeeper) is left out.
func Messages(t testing.TB, js jetstream.JetStream, stream string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		if streams.IsKeeper(m.Subject) {
			continue // a queue's keeper: not a token
		}
		out = append(out, m.Data)
	}
	return out
}

// KeepCallbacks makes CALLBACKS keep every callback, applied or not, so
// that Callbacks reads them all; without it, authz's acknowledgement
// removes each callback it applied.
func KeepCallbacks(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := streams.KeepCallbacks(ctx, js, streams.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
}

// Callbacks decodes every callback in CALLBACKS, alone or in a group
// (records.DecodeCallbacks), by batch id: those authz applied only under
// KeepCallbacks.
func Callbacks(t testing.TB, js jetstream.JetStream) map[uint64][]records.Callback {
	t.Helper()
	out := map[uint64][]records.Callback{}
	for _, data := range Messages(t, js, streams.StreamCallbacks) {
		cbs, _, err := records.DecodeCallbacks(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, cb := range cbs {
			out[cb.BatchID] = append(out[cb.BatchID], cb)
		}
	}
	return out
}

// DeadLetters decodes every dead letter in DLQ, in order.
func DeadLetters(t testing.TB, js jetstream.JetStream) []records.DeadLetter {
	t.Helper()
	var out []records.DeadLetter
	for _, data := range Messages(t, js, streams.StreamDLQ) {
		dl, err := records.Decode[records.DeadLetter](data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, dl)
	}
	return out
}

// VerifyTestMain runs a package's tests and fails them if goroutines leak,
// ignoring the ones an in-process nats-server keeps by design.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).Start.func1"),
		goleak.IgnoreTopFunction("time.Sleep"))
}

// Progress reads a batch's progress record, and says whether there is one.
func Progress(t testing.TB, js jetstream.JetStream, domain string, id uint64) (records.Progress, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.BucketProgress)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, streams.ProgressKey(domain, id))
	if err != nil {
		return records.Progress{}, false
	}
	p, err := records.Decode[records.Progress](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	return p, true
}

// Receive receives from ch, waiting at most d, and says whether it did.
func Receive[T any](ch <-chan T, d time.Duration) (T, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-timer.C:
		var zero T
		return zero, false
	}
}
