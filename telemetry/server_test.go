package telemetry_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// TestEndpoints: the three paths answer GET and HEAD; anything else gets a
// short 404 or 405 that does not echo the request.
func TestEndpoints(t *testing.T) {
	url := serve(t, telemetry.New(telemetry.Options{}))
	long := "/" + strings.Repeat("x", 4000)
	for _, tc := range []struct {
		name, method, path string
		code               int
		body               string
	}{
		{"health", http.MethodGet, "/healthz", 200, "ok"},
		{"ready without checks", http.MethodGet, "/readyz", 200, "ready"},
		{"metrics", http.MethodGet, "/metrics", 200, "go_goroutines"},
		{"metrics head", http.MethodHead, "/metrics", 200, ""},
		{"metrics post", http.MethodPost, "/metrics", 405, "only GET and HEAD"},
		{"health delete", http.MethodDelete, "/healthz", 405, "only GET and HEAD"},
		{"unknown path", http.MethodGet, "/debug/pprof", 404, "/metrics, /healthz and /readyz"},
		{"long path", http.MethodGet, long, 404, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, tc.method, url+tc.path)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Fatalf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, code, body, tc.code, tc.body)
			}
			if strings.Contains(body, "xxxx") || strings.Contains(body, "pprof") {
				t.Fatalf("the answer echoes the request: %q", body)
			}
		})
	}
	// An oversized request header is refused before any handler runs.
	req, _ := http.NewRequest(http.MethodGet, url+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("y", 64<<10))
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("a 64 KiB header: %d, want 431", resp.StatusCode)
	}
}

// TestListenRefusesBadAddress: an address that is not host:port, or one in
// use, is an error matching ErrListen that says what was expected.
func TestListenRefusesBadAddress(t *testing.T) {
	tel := telemetry.New(telemetry.Options{})
	_, err := telemetry.Listen("9464", tel, nil)
	if !errors.Is(err, telemetry.ErrListen) || !strings.Contains(err.Error(), "host:port") {
		t.Fatalf("Listen(9464) = %v, want ErrListen saying host:port", err)
	}
	srv, err := telemetry.Listen("127.0.0.1:0", tel, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	if _, err := telemetry.Listen(srv.Addr(), tel, nil); !errors.Is(err, telemetry.ErrListen) {
		t.Fatalf("Listen on an address in use = %v, want ErrListen", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestNilIsOff: every hook is safe on a nil Telemetry, and a nil Telemetry
// writes no trace context.
func TestNilIsOff(t *testing.T) {
	var tel *telemetry.Telemetry
	ctx := context.Background()
	b := &pipeline.Batch{ID: 1, Domain: "d", Label: "l", Priority: pipeline.High}
	tel.BatchSubmitted(ctx, b)
	tel.BatchFinished(ctx, b, pipeline.ExecutedOutcome(1))
	tel.CallbackApplied("d", time.Now())
	c2, span := tel.StartRequest(ctx, "send", "alice", nil)
	span.End()
	c3, step := tel.StartStep(ctx, "d", pipeline.High, nil)
	step.End(1, api.ActionFinished, "Executed", false)
	c4, call := tel.StartCall(ctx, "w", nil, nil)
	call.End(false)
	tel.FallbackUsed("d")
	tel.HandlerDone("noop", telemetry.KindFunction, time.Now(), nil)
	tel.WorkerBusy()
	tel.TickPublished("d", nil)
	tel.WatchQueues(nil, "d")
	tel.WatchSteps("d")
	tel.WatchCalls()
	tel.AddReadiness("x", nil, telemetry.Resources{})
	if errs := tel.Ready(ctx); errs != nil {
		t.Fatalf("Ready = %v", errs)
	}
	for _, c := range []context.Context{c2, c3, c4} {
		if c != ctx {
			t.Fatal("a hook of a nil Telemetry changed the context")
		}
	}
	h := map[string][]string{}
	telemetry.Inject(c2, h)
	if len(h) != 0 {
		t.Fatalf("Inject without a span wrote %v", h)
	}
}
