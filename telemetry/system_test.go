package telemetry_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/system"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// runSystem runs what `make run` runs (without the demo) on a test server,
// with tel, until the test ends, and returns a client speaking as alice.
func runSystem(t *testing.T, tel *telemetry.Telemetry) *client.Client {
	t.Helper()
	c, _ := runSystemEnv(t, tel)
	return c
}

// runSystemEnv is runSystem that also returns the test server.
func runSystemEnv(t *testing.T, tel *telemetry.Telemetry) (*client.Client, *testnats.Env) {
	t.Helper()
	env := testnats.Start(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- system.Run(ctx, system.Options{
			Server: env.Server, Settings: env.Settings, Domains: []string{"payments", "reports"},
			TickEvery: 10 * time.Millisecond, TablePath: filepath.Join(filepath.Dir(testnats.ConfigPath(t)), "authz.yaml"),
			Logger: slog.New(slog.DiscardHandler), Telemetry: tel,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("system: %v", err)
		}
	})
	c, err := client.New(env.Conn(t, "alice"), "alice", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c, env
}

// send submits under label, retrying while authz is not up yet.
func send(t *testing.T, c *client.Client, label string, calls ...api.CallSpec) uint64 {
	t.Helper()
	ctx := testnats.Context(t, 10*time.Second)
	for {
		rep, err := c.Send(ctx, api.SendRequest{Label: label, Functions: calls})
		if errors.Is(err, client.ErrNotRunning) && ctx.Err() == nil {
			time.Sleep(10 * time.Millisecond) // polling for authz to start serving
			continue
		}
		if err != nil {
			t.Fatalf("send %s: %v", label, err)
		}
		return rep.ID
	}
}

// finished waits until batch id's record is terminal and returns its status.
func finished(t *testing.T, c *client.Client, id uint64) pipeline.Status {
	t.Helper()
	var status pipeline.Status
	testnats.Eventually(t, 20*time.Second, "the batch to finish", func() bool {
		rep, err := c.Batch(context.Background(), api.IDRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		status = rep.Record.Status
		return status.Terminal()
	})
	return status
}

func call(typ string, payload any) api.CallSpec {
	if payload == nil {
		return api.CallSpec{Type: typ}
	}
	return api.CallSpec{Type: typ, Payload: pipeline.MustPayload(payload)}
}

// TestScrapeCountsBatches runs a small system, sends batches with known
// outcomes and finds them counted in /metrics, scraped over HTTP:
// submitted and finished by domain, label and outcome, fallbacks, handler
// calls, dead letters, queue depths and the callback lag. A label outside
// the table is refused and appears nowhere.
func TestScrapeCountsBatches(t *testing.T) {
	tel := telemetry.New(telemetry.Options{CacheTTL: time.Nanosecond})
	c := runSystem(t, tel)
	url := serve(t, tel)

	const executed, rejected = 3, 2
	var ids []uint64
	for range executed {
		ids = append(ids, send(t, c, "jobs", call(handlers.TypeNoop, nil)))
	}
	for range rejected {
		ids = append(ids, send(t, c, "jobs", call(handlers.TypeFail, handlers.FailArgs{Permanent: true})))
	}
	ids = append(ids, send(t, c, "jobs", call(handlers.TypeFail, handlers.FailArgs{Permanent: true, Fallback: true})))
	_, err := c.Send(context.Background(), api.SendRequest{Label: "no-such-label", Functions: api.Calls{call(handlers.TypeNoop, nil)}})
	if !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("send under an unknown label: %v, want ErrNotFound", err)
	}
	want := map[pipeline.Status]int{}
	for _, id := range ids {
		want[finished(t, c, id)]++
	}
	if want[pipeline.Executed] != executed+1 || want[pipeline.Rejected] != rejected {
		t.Fatalf("outcomes %v, want %d Executed and %d Rejected", want, executed+1, rejected)
	}

	expect := map[string]float64{
		series("tickflow_batches_submitted_total", "domain", "payments", "label", "jobs", "priority", "med"):           executed + rejected + 1,
		series("tickflow_batches_finished_total", "domain", "payments", "label", "jobs", "outcome", "Executed"):        executed + 1,
		series("tickflow_batches_finished_total", "domain", "payments", "label", "jobs", "outcome", "Rejected"):        rejected,
		series("tickflow_batch_outcome_seconds_count", "domain", "payments", "outcome", "Executed"):                    executed + 1,
		series("tickflow_callback_apply_lag_seconds_count", "domain", "payments"):                                      executed + rejected + 1,
		series("tickflow_processor_fallbacks_total", "domain", "payments"):                                             1,
		series("tickflow_worker_handler_seconds_count", "type", "noop", "kind", "function", "result", "ok"):            executed,
		series("tickflow_worker_handler_seconds_count", "type", "fail", "kind", "function", "result", "error"):         rejected + 1,
		series("tickflow_worker_handler_seconds_count", "type", "fail", "kind", "fallback", "result", "ok"):            1,
		series("tickflow_worker_handler_seconds_count", "type", "fail", "kind", "fallback", "result", "error"):         rejected,
		series("tickflow_processor_step_seconds_count", "domain", "payments", "priority", "med", "action", "finished"): executed + rejected + 1,
		series("tickflow_dlq_messages", "domain", "payments"):                                                          rejected,
		series("tickflow_queue_depth", "domain", "payments", "priority", "med"):                                        0,
		series("tickflow_queue_depth", "domain", "reports", "priority", "high"):                                        0,
		series("tickflow_processor_steps_in_flight", "domain", "payments"):                                             0,
		series("tickflow_worker_calls_in_flight"):                                                                      0,
	}
	// The callback is acknowledged (and its lag observed) just after its
	// record is written: poll until the scrape has caught up.
	var got map[string]float64
	testnats.Eventually(t, 10*time.Second, "the metrics to match", func() bool {
		got = scrape(t, url)
		for s, v := range expect {
			if got[s] != v {
				return false
			}
		}
		return true
	})
	if ticks := got[series("tickflow_ticker_ticks_total", "domain", "payments", "result", "published")]; ticks < 1 {
		t.Errorf("ticks published: %v, want some", ticks)
	}
	code, body := get(t, "GET", url+"/metrics")
	if code != 200 || strings.Contains(body, "no-such-label") {
		t.Fatalf("the refused label appears in /metrics (status %d)", code)
	}
	if code, body := get(t, "GET", url+"/readyz"); code != 200 {
		t.Fatalf("readyz of a running system: %d %s", code, body)
	}
}

// TestPausedQueueAges: a paused domain's queued batch shows in the metrics
// as a queue whose oldest token ages, beside the domain's pause, although
// no step runs.
func TestPausedQueueAges(t *testing.T) {
	tel := telemetry.New(telemetry.Options{CacheTTL: time.Nanosecond})
	c, env := runSystemEnv(t, tel)
	owner, err := client.New(env.Conn(t, "owner"), "owner", client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "the pause", func() bool {
		_, err := owner.Pause(context.Background(), api.DomainRequest{Domain: "payments"})
		return err == nil
	})
	url := serve(t, tel)
	id := send(t, c, "jobs", call(handlers.TypeNoop, nil))
	oldest := series("tickflow_queue_oldest_seconds", "domain", "payments", "priority", "med")
	paused := series("tickflow_domain_paused", "domain", "payments")
	var got map[string]float64
	testnats.Eventually(t, 10*time.Second, "the paused queue's age", func() bool {
		got = scrape(t, url)
		if got[oldest] > 0 && got[paused] == 1 {
			return true
		}
		// A tick that read the pause state just before the pause may still
		// take the batch (a pause stops a replica within one round of
		// steps): on a loaded machine it can. A batch sent after that
		// waits.
		if rep, err := c.Batch(context.Background(), api.IDRequest{ID: id}); err == nil && rep.Record.Status.Terminal() {
			id = send(t, c, "jobs", call(handlers.TypeNoop, nil))
		}
		return false
	})
	if v, ok := got[series("tickflow_domain_paused", "domain", "reports")]; !ok || v != 0 {
		t.Fatalf("reports paused = %v (reported: %v), want 0", v, ok)
	}
	if v, ok := got[series("tickflow_queue_oldest_seconds", "domain", "reports", "priority", "high")]; !ok || v != 0 {
		t.Fatalf("empty queue's oldest = %v (reported: %v), want 0", v, ok)
	}
}
