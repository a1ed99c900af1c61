package telemetry

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// HeaderCarrier carries a trace context in NATS message headers. Header
// names are the W3C ones, lower case, as nats.Header keeps them.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier(nil)

// Get returns the first value of key.
func (c HeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set replaces the values of key with value.
func (c HeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys lists the keys present.
func (c HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// propagator reads and writes the W3C trace context (traceparent,
// tracestate); tickflow carries no baggage.
var propagator = propagation.TraceContext{}

// Inject writes the trace context of ctx's span into h, for the next
// process to continue the trace. Without a span in ctx (tracing off) it
// writes nothing, at the cost of one context lookup.
func Inject(ctx context.Context, h nats.Header) {
	if h == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	propagator.Inject(ctx, HeaderCarrier(h))
}

// InjectMap is Inject into a map, for a trace context that travels in a
// message body (one request carrying several calls); nil when t does not
// trace or ctx has no span. It asks t first: finding the span walks ctx's
// whole chain, which a deep context makes cost every step.
func (t *Telemetry) InjectMap(ctx context.Context) map[string]string {
	if !t.Tracing() || !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	m := propagation.MapCarrier{}
	propagator.Inject(ctx, m)
	return m
}

// maxTraceEntries bounds the entries of a trace map read from a message
// body: the W3C context has two.
const maxTraceEntries = 4

// ExtractMap is Extract from a map written by InjectMap.
func (t *Telemetry) ExtractMap(ctx context.Context, m map[string]string) context.Context {
	if !t.Tracing() || len(m) == 0 || len(m) > maxTraceEntries {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(m))
}

// Extract returns ctx carrying the remote span context found in h, the
// parent of the spans started from it; ctx unchanged when t does not
// trace or h carries none.
func (t *Telemetry) Extract(ctx context.Context, h nats.Header) context.Context {
	if !t.Tracing() || h == nil {
		return ctx
	}
	return propagator.Extract(ctx, HeaderCarrier(h))
}

// offSpan is the span handed out when tracing is off: it records nothing,
// and ending it ends nothing.
var offSpan = trace.SpanFromContext(context.Background())

// start starts a span called name, the child of the trace context in h (or
// of ctx's span when h carries none).
func (t *Telemetry) start(ctx context.Context, name string, h nats.Header, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if !t.Tracing() {
		return ctx, offSpan
	}
	if h != nil {
		if sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), HeaderCarrier(h))); sc.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
		}
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// Span attribute keys.
const (
	attrBatchID   = attribute.Key("tickflow.batch_id")
	attrDomain    = attribute.Key("tickflow.domain")
	attrLabel     = attribute.Key("tickflow.label")
	attrPriority  = attribute.Key("tickflow.priority")
	attrOperation = attribute.Key("tickflow.operation")
	attrUser      = attribute.Key("tickflow.user")
	attrAction    = attribute.Key("tickflow.step.action")
	attrOutcome   = attribute.Key("tickflow.outcome")
	attrType      = attribute.Key("tickflow.function.type")
	attrIndex     = attribute.Key("tickflow.function.index")
	attrAttempt   = attribute.Key("tickflow.attempt")
	attrUnit      = attribute.Key("tickflow.unit")
	attrWorker    = attribute.Key("tickflow.worker")
)

// messaging marks a span as one of a NATS messaging system, after
// OpenTelemetry's semantic conventions.
var messaging = attribute.String("messaging.system", "nats")
