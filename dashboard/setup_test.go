package dashboard_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/dashboard"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/streams"
	"github.com/tickflow/tickflow/worker"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

const domain = "pay"

const tableYAML = `
labels:
  jobs:
    domain: pay
    users: [alice, bob]
    mode: non_atomic
    priority: med
    functions:
      noop: {}
      fail: {}
      flaky: {}
`

// bundle is a server with authz (owner "owner"), a worker, a processor of
// domain pay that runs only when the test ticks it, and the dashboard on
// a loopback port.
type bundle struct {
	env          *testnats.Env
	ctx          context.Context
	proc         *processor.Processor
	alice, owner *client.Client
	url          string
}

// setup starts the bundle; opts change the dashboard's config, Dial set.
func setup(t *testing.T, opts ...func(*dashboard.Config)) *bundle {
	t.Helper()
	// The dashboard dials over TCP, as it does where the server listens: a
	// refused login then ends at once, where an in-process connection waits
	// out the server's write deadline.
	env := testnats.Start(t, []string{domain}, func(eo *embedded.Options, _ *streams.Settings) {
		eo.DontListen, eo.Listen = false, "127.0.0.1:0"
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &bundle{env: env, ctx: ctx}
	table, err := authz.ParseTable([]byte(tableYAML))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := authz.New(ctx, env.Conn(t, "authz"), authz.Options{Owner: "owner", Table: table})
	if err != nil {
		t.Fatal(err)
	}
	mux := pipeline.NewServeMux()
	handlers.Register(mux, handlers.NewLedger(nil), nil)
	w, err := worker.New(ctx, env.Conn(t, "worker"), mux, worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b.proc, err = processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: domain, Name: "processor-1"}); err != nil {
		t.Fatal(err)
	}
	cfg := dashboard.Config{
		Dial: func(user, password string) (*nats.Conn, error) {
			return streams.Connect(streams.Credentials{URL: env.Server.URL(), User: user, Password: password, Name: "dashboard-" + user})
		},
		Refresh: 300 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	dash, err := dashboard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b.url = "http://" + ln.Addr().String()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, 3)
	go func() { _ = svc.Run(rctx); done <- struct{}{} }()
	go func() { _ = w.Run(rctx); done <- struct{}{} }()
	go func() { _ = dash.Serve(rctx, ln); done <- struct{}{} }()
	t.Cleanup(func() { stop(); <-done; <-done; <-done })
	for _, u := range []struct {
		name string
		c    **client.Client
	}{{"alice", &b.alice}, {"owner", &b.owner}} {
		if *u.c, err = client.New(env.Conn(t, u.name), u.name, client.Config{}); err != nil {
			t.Fatal(err)
		}
	}
	admin := env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "services up", func() bool {
		_, e1 := admin.Request("$SRV.PING.worker", nil, 100*time.Millisecond)
		_, e2 := admin.Request("$SRV.PING.authz", nil, 100*time.Millisecond)
		return e1 == nil && e2 == nil
	})
	return b
}

// send submits a batch of functions as alice.
func (b *bundle) send(t *testing.T, calls ...api.CallSpec) uint64 {
	t.Helper()
	rep, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: calls})
	if err != nil {
		t.Fatal(err)
	}
	return rep.ID
}

// settledBy ticks the processor p until batch id is finished.
func (b *bundle) settledBy(t *testing.T, p *processor.Processor, id uint64) *api.BatchRecord {
	t.Helper()
	var rec *api.BatchRecord
	testnats.Eventually(t, 10*time.Second, "batch settled", func() bool {
		rep, err := b.owner.Batch(b.ctx, api.IDRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if rec = rep.Record; rec.Status.Terminal() {
			return true
		}
		p.Tick(b.ctx, 4)
		return false
	})
	return rec
}

func noop() api.CallSpec { return api.CallSpec{Type: handlers.TypeNoop} }

// flaky succeeds at once, its output its attempt: 1.
func flaky() api.CallSpec {
	return api.CallSpec{Type: handlers.TypeFlaky, Payload: pipeline.MustPayload(handlers.FlakyArgs{})}
}

func fail() api.CallSpec {
	return api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})}
}

// browserless is an HTTP client that keeps no cookies and follows no
// redirects: each request says exactly what it carries.
var browserless = &http.Client{
	Timeout:       10 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// login posts the login form and returns the session cookie, or nil.
func (b *bundle) login(t *testing.T, user, password string) (*http.Response, *http.Cookie) {
	t.Helper()
	return b.loginWith(t, user, password)
}

// loginWith posts the login form with extra headers, and a cookie
// (*http.Cookie) among them if any, and returns the session cookie (of
// either name), or nil.
func (b *bundle) loginWith(t *testing.T, user, password string, extra ...any) (*http.Response, *http.Cookie) {
	t.Helper()
	form := "user=" + user + "&password=" + password
	req, _ := http.NewRequest(http.MethodPost, b.url+"/login", strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i < len(extra); i++ {
		switch v := extra[i].(type) {
		case *http.Cookie:
			req.AddCookie(v)
		case string:
			setHeader(req, v, extra[i+1].(string))
			i++
		}
	}
	resp, err := browserless.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, c := range resp.Cookies() {
		if c.Name == "tickflow_session" || c.Name == "__Host-tickflow_session" {
			return resp, c
		}
	}
	return resp, nil
}

// clock is a test's clock: it moves only when the test moves it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 1, 9, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
