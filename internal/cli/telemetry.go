package cli

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/tickflow/tickflow/telemetry"
	"github.com/tickflow/tickflow/telemetry/tracing"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// MetricsFlag registers -metrics-listen on the command line, def its
// default, and returns where its value goes.
func MetricsFlag(def string) *string {
	return flag.String("metrics-listen", def, "serve /metrics, /healthz and /readyz on this `address` (host:port, port 0 picks one; empty: not served)")
}

// Observability is a command's telemetry: the metrics and readiness of its
// components, served on an address, and its traces, exported as the
// OTEL_* variables say.
type Observability struct {
	// Telemetry goes into the components' Options; nil when the command
	// neither serves metrics nor traces.
	Telemetry *telemetry.Telemetry

	addr     string
	provider *sdktrace.TracerProvider
	log      *slog.Logger
	cancel   context.CancelFunc
	served   chan error
}

// StartTelemetry sets up the telemetry of the command called component:
// tracing when the OTEL_* variables ask for it (package tracing), and the
// endpoints served on listen unless it is empty. Close it on the way out.
func StartTelemetry(ctx context.Context, component, listen string, log *slog.Logger) (*Observability, error) {
	o := &Observability{log: log}
	tp, err := tracing.FromEnv(ctx, component)
	if err != nil {
		return nil, err
	}
	if tp == nil && listen == "" {
		return o, nil
	}
	opts := telemetry.Options{Logger: log}
	if tp != nil {
		o.provider, opts.TracerProvider = tp, tp
		log.Info("tracing on: spans exported as the OTEL_* variables say")
	}
	o.Telemetry = telemetry.New(opts)
	if listen == "" {
		return o, nil
	}
	srv, err := telemetry.Listen(listen, o.Telemetry, log)
	if err != nil {
		o.Close()
		return nil, fmt.Errorf("-metrics-listen: %w", err)
	}
	o.addr = srv.Addr()
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.cancel, o.served = cancel, make(chan error, 1)
	go func() { o.served <- srv.Run(sctx) }()
	log.Info("serving metrics, health and readiness", "addr", o.addr)
	return o, nil
}

// Addr is the address the endpoints are served on, "" when none.
func (o *Observability) Addr() string { return o.addr }

// Close stops serving the endpoints and flushes the spans not yet exported.
func (o *Observability) Close() {
	if o.cancel != nil {
		o.cancel()
		if err := <-o.served; err != nil {
			o.log.Warn("telemetry server", "err", err)
		}
		o.cancel = nil
	}
	if o.provider != nil {
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := o.provider.Shutdown(ctx); err != nil {
			o.log.Warn("spans not flushed", "err", err)
		}
		o.provider = nil
	}
}

// flushTimeout bounds the export of the last spans on the way out.
const flushTimeout = 5 * time.Second
