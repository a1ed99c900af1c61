package authz_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
)

// onMessage is a slog.Handler that calls f when a record with message msg
// is logged, and discards everything.
type onMessage struct {
	msg string
	f   func()
}

func (h onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.f()
	}
	return nil
}
func (h onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onMessage) WithGroup(string) slog.Handler      { return h }

// TestStopUnderLoadAnswersEveryRequest: authz stopped with its request
// slots taken and a burst of submissions still queued in its client
// finishes the requests it took, answers every other one "503 shutting
// down" before Run returns, logs "authz stopped" only after that, and runs
// no request after it. Its connection closes the moment Run returns, as a
// command's does, so a request answered later would never be.
func TestStopUnderLoadAnswersEveryRequest(t *testing.T) {
	env := testnats.Start(t, []string{domain}, testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second }))
	const n = 300
	// alice may hold every request in flight: they queue in authz, not
	// refused as over her share.
	table, err := authz.ParseTable([]byte(tableYAML + "callers:\n  alice: {max_requests: " + strconv.Itoa(n) + "}\n"))
	if err != nil {
		t.Fatal(err)
	}
	var stopped atomic.Bool
	var late atomic.Int32
	var run testsystem.Stopping
	ac := env.Conn(t, "authz")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc, err := authz.New(ctx, ac, authz.Options{
		Table: table, Concurrency: 2,
		Logger: slog.New(onMessage{msg: "authz stopped", f: func() { stopped.Store(true) }}),
		Now: func() time.Time {
			if stopped.Load() || run.Returned() {
				late.Add(1)
			}
			return time.Now()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	run.Start(ctx, ac, svc.Run)
	admin := env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "authz up", func() bool {
		_, err := admin.Request("$SRV.PING.authz", nil, 100*time.Millisecond)
		return err == nil
	})

	nc := env.Conn(t, "alice")
	answers := testsystem.Collect(t, nc)
	body, err := json.Marshal(api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop()}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := nc.PublishRequest(streams.AuthzSubject("alice", "send"), answers.Reply(i), body); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	<-answers.First() // serving, with the rest queued behind two slots
	cancel()
	run.Wait(t)

	answers.WaitAll(t, n, "requests")
	accepted := 0
	for i := range n {
		m := answers.Once(t, "request", i)
		if testsystem.Refused(t, "request", i, m) {
			continue
		}
		var rep api.SendReply
		if err := json.Unmarshal(m.Data, &rep); err != nil || rep.ID == 0 {
			t.Fatalf("request %d: %s: %v", i, m.Data, err)
		}
		accepted++
	}
	if accepted == 0 {
		t.Fatal("no request served")
	}
	if n := late.Load(); n != 0 {
		t.Fatalf("%d requests ran after authz stopped", n)
	}
}
