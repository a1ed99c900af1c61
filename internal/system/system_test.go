package system_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	neturl "net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/examples/demo"
	"github.com/tickflow/tickflow/internal/system"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// TestDemo runs what `make run` runs, on a test server, and checks the
// demo's outcome table: the workload README.md walks through.
func TestDemo(t *testing.T) {
	env := testnats.Start(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rowsCh := make(chan []demo.Row, 1)
	done := make(chan error, 1)
	go func() {
		done <- system.Run(ctx, system.Options{
			Server: env.Server, Settings: env.Settings, Domains: []string{"payments", "reports", "chain"},
			Senders:   map[string]map[string]string{"chain": {"sender-a": "env:TICKFLOW_SENDER_A", "sender-b": "env:TICKFLOW_SENDER_B"}},
			TickEvery: 20 * time.Millisecond, TablePath: filepath.Join(filepath.Dir(testnats.ConfigPath(t)), "authz.yaml"),
			Demo: true, OnDemo: func(r []demo.Row) { rowsCh <- r },
			Logger: slog.New(slog.DiscardHandler), Dashboard: ln,
		})
	}()
	var rows []demo.Row
	select {
	case rows = <-rowsCh:
	case err := <-done:
		t.Fatalf("system stopped early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not finish in 60s")
	}
	dashboardServes(t, "http://"+ln.Addr().String())
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("system: %v", err)
	}
	demoRunsOnce(t, env)
	want := map[string]pipeline.Status{
		"two transfers, all or nothing":                        pipeline.Executed,
		"overdraft: rolled back, dead letter":                  pipeline.Rejected,
		"job: flaky step retried, then an HTTP call":           pipeline.Executed,
		"job failing at its 2nd step: dead letter":             pipeline.PartiallyExecuted,
		"job whose failure a fallback handles":                 pipeline.Executed,
		"underwriting: form, bank statement, report":           pipeline.Executed,
		"settlement waiting for a confirmation":                pipeline.Executed,
		"chain: dispatch on zkapp-1, polled until included":    pipeline.Executed,
		"chain: dispatch on zkapp-2, dropped once, fee raised": pipeline.Executed,
		"chain: zkapp-1 again, waits for a free sender":        pipeline.Executed,
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		if want[r.What] != r.Status {
			t.Errorf("%s: %s, want %s", r.What, r.Outcome, want[r.What])
		}
		// The dropped transaction was dispatched again: two attempts.
		if r.What == "chain: dispatch on zkapp-2, dropped once, fee raised" && r.Attempts != 2 {
			t.Errorf("%s: %d attempts, want 2", r.What, r.Attempts)
		}
	}
	var out bytes.Buffer
	demo.Print(&out, rows)
	// The README shows this table; the overdraft runs after the first
	// transfer, so its message is the same on every run.
	for _, want := range []string{"PartiallyExecuted(1)", "Rejected(handlers: insufficient funds: alice has 920, needs 1000000)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q in the table:\n%s", want, out.String())
		}
	}
}

// demoRunsOnce restarts the system with the demo on the store the demo
// ran in: it submits nothing again and says so (OnDemo gets no rows).
func demoRunsOnce(t *testing.T, env *testnats.Env) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rowsCh := make(chan []demo.Row, 1)
	done := make(chan error, 1)
	go func() {
		done <- system.Run(ctx, system.Options{
			Server: env.Server, Settings: env.Settings, Domains: []string{"payments", "reports", "chain"},
			Senders:   map[string]map[string]string{"chain": {"sender-a": "env:TICKFLOW_SENDER_A", "sender-b": "env:TICKFLOW_SENDER_B"}},
			TickEvery: 20 * time.Millisecond, TablePath: filepath.Join(filepath.Dir(testnats.ConfigPath(t)), "authz.yaml"),
			Demo: true, OnDemo: func(r []demo.Row) { rowsCh <- r },
			Logger: slog.New(slog.DiscardHandler),
		})
	}()
	select {
	case rows := <-rowsCh:
		if len(rows) != 0 {
			var out bytes.Buffer
			demo.Print(&out, rows)
			t.Errorf("the demo ran again in a store it ran in, adding:\n%s", out.String())
		}
	case err := <-done:
		t.Fatalf("system stopped early: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the second demo did not answer in 60s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("system: %v", err)
	}
}

// TestBuildErrorStartsNothing: a component that cannot be built (here the
// ticker, last of all, with a negative interval) makes Run return its error
// with nothing started: no service answers, and goleak in TestMain finds no
// goroutine left behind.
func TestBuildErrorStartsNothing(t *testing.T) {
	env := testnats.Start(t, nil)
	var logs bytes.Buffer
	err := system.Run(context.Background(), system.Options{
		Server: env.Server, Settings: env.Settings, Domains: []string{"payments"},
		TickEvery: -time.Second, TablePath: filepath.Join(filepath.Dir(testnats.ConfigPath(t)), "authz.yaml"),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err == nil || !strings.Contains(err.Error(), "Every") {
		t.Fatalf("Run = %v, want the ticker's error about Every", err)
	}
	if strings.Contains(logs.String(), "serving") {
		t.Fatalf("a component started before the error:\n%s", logs.String())
	}
}

// dashboardServes logs in to the dashboard as the owner and finds the
// domains run serves.
func dashboardServes(t *testing.T, url string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := hc.PostForm(url+"/login", neturl.Values{"user": {"owner"}, "password": {"local-owner"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = hc.Get(url + "/api/domains")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doms struct {
		Domains []struct {
			Domain string `json:"domain"`
		} `json:"domains"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&doms); err != nil || len(doms.Domains) != 3 || doms.Domains[0].Domain != "chain" || doms.Domains[1].Domain != "payments" {
		t.Fatalf("dashboard domains: %d %+v %v", resp.StatusCode, doms, err)
	}
}
