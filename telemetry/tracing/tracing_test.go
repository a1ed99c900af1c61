package tracing_test

import (
	"context"
	"testing"

	"github.com/tickflow/tickflow/telemetry/tracing"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEnabled: tracing is off unless the OTEL_* variables ask for it.
func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"exporter none", map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{"exporter otlp", map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{"exporter console", map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{"an endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"a traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"sdk disabled", map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{"none wins over an endpoint", map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tracing.Enabled(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Fatalf("Enabled = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFromEnv: no provider by default; a provider with the console exporter
// when asked; an unknown exporter name is an error.
func TestFromEnv(t *testing.T) {
	ctx := context.Background()
	for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	tp, err := tracing.FromEnv(ctx, "authz")
	if tp != nil || err != nil {
		t.Fatalf("FromEnv with nothing set = %v, %v; want nil, nil", tp, err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	tp, err = tracing.FromEnv(ctx, "authz")
	if err != nil || tp == nil {
		t.Fatalf("FromEnv with the console exporter = %v, %v", tp, err)
	}
	if err := tp.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "carrier-pigeon")
	if _, err := tracing.FromEnv(ctx, "authz"); err == nil {
		t.Fatal("FromEnv with an unknown exporter: no error")
	}
}
