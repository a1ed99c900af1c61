// Package tracing builds the OpenTelemetry tracer provider of a tickflow
// process from the standard OTEL_* environment variables. Tracing is off
// unless they ask for it: OTEL_TRACES_EXPORTER names an exporter other than
// "none" (otlp, console), or OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names a collector; OTEL_SDK_DISABLED=true
// turns it off whatever else is set. The exporter and its settings
// (OTEL_EXPORTER_OTLP_PROTOCOL, _HEADERS, _TIMEOUT, …), the sampler
// (OTEL_TRACES_SAMPLER, _ARG), the batching (OTEL_BSP_*) and the resource
// (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) are read by OpenTelemetry
// itself, as its documentation describes.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Enabled says whether the variables getenv reads ask for tracing.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	if e := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); e != "" {
		return e != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns the tracer provider the OTEL_* variables of the process
// configure, with service.name "tickflow-"+component unless
// OTEL_SERVICE_NAME names another; nil, nil when they do not ask for tracing
// (Enabled). Shut the provider down before the process exits: it flushes
// the spans still buffered.
func FromEnv(ctx context.Context, component string) (*sdktrace.TracerProvider, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: exporter from OTEL_TRACES_EXPORTER: %w", err)
	}
	// Later options win: the variables over the default name.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "tickflow-"+component)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		return nil, fmt.Errorf("tracing: resource from OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
