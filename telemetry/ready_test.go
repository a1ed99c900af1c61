package telemetry_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// TestReadiness: /readyz is 503 while the resources a component needs do
// not exist, 200 once they are provisioned, and 503 again once its
// connection is closed; /healthz stays 200 throughout.
func TestReadiness(t *testing.T) {
	env := testnats.Start(t, nil)
	nc := env.Conn(t, "processor")
	// A round of checks is reused for CacheTTL: a nanosecond here, so each
	// request checks again.
	tel := telemetry.New(telemetry.Options{CacheTTL: time.Nanosecond})
	tel.AddReadiness("processor pay", nc, telemetry.Resources{
		Buckets:   []string{streams.BucketProgress},
		Consumers: []telemetry.Consumer{{Stream: streams.QueueStream(pipeline.High), Name: streams.ProcessorConsumer("pay")}},
	})
	url := serve(t, tel)

	code, body := get(t, http.MethodGet, url+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "processor pay: bucket progress") {
		t.Fatalf("before provisioning: %d %q, want 503 naming the missing bucket", code, body)
	}
	if errs := tel.Ready(context.Background()); len(errs) != 1 || !errors.Is(errs[0], telemetry.ErrNotReady) {
		t.Fatalf("Ready = %v, want one error matching ErrNotReady", errs)
	}

	ctx := testnats.Context(t, 10*time.Second)
	if err := streams.Provision(ctx, env.JS(t, "admin"), env.Settings, "pay"); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, http.MethodGet, url+"/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ready" {
		t.Fatalf("provisioned: %d %q, want 200 ready", code, body)
	}

	nc.Close()
	code, body = get(t, http.MethodGet, url+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not connected to NATS") {
		t.Fatalf("connection closed: %d %q, want 503 not connected", code, body)
	}
	if code, _ := get(t, http.MethodGet, url+"/healthz"); code != http.StatusOK {
		t.Fatalf("healthz with the connection closed: %d, want 200", code)
	}
}

// TestQueueFiguresCached: the figures read from the server on a scrape are
// read at most once per CacheTTL; a figure the server does not give is left
// out and counted as a fetch error, and the scrape still succeeds.
func TestQueueFiguresCached(t *testing.T) {
	env := testnats.Start(t, nil) // nothing provisioned: every read fails
	tel := telemetry.New(telemetry.Options{CacheTTL: time.Hour})
	tel.WatchQueues(env.JS(t, "processor"), "pay")
	url := serve(t, tel)
	errs := series("tickflow_telemetry_fetch_errors_total", "what", "queues")
	// A scrape gathers the error counter and reads the queues at once, so
	// the errors of the first reading show from the second scrape on.
	first := scrape(t, url)
	if _, ok := first[series("tickflow_queue_depth", "domain", "pay", "priority", "high")]; ok {
		t.Fatal("a queue depth the server did not give was reported")
	}
	for i := range 2 {
		if got := scrape(t, url)[errs]; got != 2 { // the domain's HIGH and MED consumers, once
			t.Fatalf("%s = %v after scrape %d within CacheTTL, want 2 (one reading)", errs, got, i+2)
		}
	}
}
