package dashboard_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/dashboard"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

const domain = "pay"

const tableYAML = testsystem.JobsTable

// bundle is a server with authz (owner "owner"), a worker, a processor of
// domain pay that runs only when the test ticks it, and the dashboard on
// a loopback port.
type bundle struct {
	*testsystem.System
	env          *testnats.Env
	ctx          context.Context
	proc         *processor.Processor
	alice, owner *client.Client
	url          string
}

// setup starts the bundle; opts change the dashboard's config, Dial set:
// it dials the server over TCP.
func setup(t *testing.T, opts ...func(*dashboard.Config)) *bundle {
	t.Helper()
	mux := pipeline.NewServeMux()
	handlers.Register(mux, handlers.NewLedger(nil), nil)
	sys := testsystem.Start(t, tableYAML, testsystem.Options{
		Handlers: mux, Processor: &processor.Options{Name: "processor-1"}, Dashboard: func(cfg *dashboard.Config) {
			cfg.Refresh = 300 * time.Millisecond
			for _, o := range opts {
				o(cfg)
			}
		},
	})
	return &bundle{System: sys, env: sys.Env, ctx: sys.Ctx, proc: sys.Proc, url: sys.URL,
		alice: sys.Client(t, "alice", client.Config{}), owner: sys.Client(t, "owner", client.Config{})}
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
	return b.Settled(t, p, id)
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
