// Package telemetry is what tickflow shows of itself: Prometheus metrics,
// the health and readiness endpoints, and OpenTelemetry traces whose
// context travels in NATS message headers, so that one batch is one trace
// from its submission to its callback, across processes.
//
// # Off costs nothing
//
// Every component takes a *Telemetry in its Options; nil turns telemetry
// off. Every method is safe on a nil receiver and returns at once, and no
// trace context is read or written, so a component without telemetry does
// the same work as before.
//
// # One registry per Telemetry
//
// A Telemetry owns its own prometheus.Registry, never the global default,
// with every tickflow metric registered once in it. Metric names say which
// component reports them (tickflow_processor_…, tickflow_worker_…), so the
// components of one process share one Telemetry and one /metrics: that is
// how `tickflow run` serves all of its components on one address, and how
// tests build as many systems in one process as they like without
// colliding. Replicas in separate processes are told apart by the scrape's
// instance label.
//
// # Bounded labels
//
// Label values come from configuration, never from what a caller sends: a
// domain and a label are the authorization table's (authz refuses any
// other before it counts), a function type is one the worker has a handler
// for, an action or an outcome is one of a fixed set.
//
// # Traces
//
// With a TracerProvider in Options, authz starts a span per request, the
// processor one per step, the worker one per call and authz one per
// callback it applies; each continues the trace whose W3C trace context
// (traceparent, tracestate) it finds in the message's headers, and writes
// its own into the messages it sends: token, work request, requeued token,
// callback. Spans carry ids, domains, labels, steps and actions, never
// payloads, outputs or error messages. Package tracing builds a provider
// from the standard OTEL_* variables.
//
// # Serving
//
// Handler serves /metrics, /healthz (the process is alive) and /readyz
// (every registered readiness check passes: connected to NATS, and the
// streams, buckets and consumers the component needs exist); Listen and
// Server.Run serve it on an address.
package telemetry
