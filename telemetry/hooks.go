package telemetry

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The hooks the components call. Each is safe on a nil *Telemetry, where it
// does nothing.

// StartRequest starts the span of an authz request: operation op (one of
// authz's own endpoint names) by user: the root of a new trace, linked to
// the caller's trace when its headers h carry one. End the span when the
// request is answered.
func (t *Telemetry) StartRequest(ctx context.Context, op, user string, h nats.Header) (context.Context, trace.Span) {
	if !t.Tracing() {
		return ctx, offSpan
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(messaging, attrOperation.String(op), attrUser.String(user))}
	if h != nil {
		// A caller's trace context is the caller's input: linked, not
		// continued, so it decides neither the sampling of the batch's
		// trace nor what travels with its messages (its tracestate is
		// dropped).
		if sc := trace.SpanContextFromContext(propagator.Extract(context.Background(), HeaderCarrier(h))); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc.WithTraceState(trace.TraceState{})}))
		}
	}
	return t.tracer.Start(ctx, "authz "+op, opts...)
}

// BatchSubmitted counts a batch authz accepted and queued, under its
// domain, label and priority (the authorization table's, never the
// caller's text), and names it on ctx's span.
func (t *Telemetry) BatchSubmitted(ctx context.Context, b *pipeline.Batch) {
	if t == nil {
		return
	}
	t.m.submitted.WithLabelValues(b.Domain, b.Label, string(b.Priority)).Inc()
	if t.tracer != nil {
		trace.SpanFromContext(ctx).SetAttributes(attrBatchID.Int64(int64(b.ID)), attrDomain.String(b.Domain),
			attrLabel.String(b.Label), attrPriority.String(string(b.Priority)))
	}
}

// StartApply starts the span of authz applying a callback whose message
// headers are h. End it once the callback is applied (or given up).
func (t *Telemetry) StartApply(ctx context.Context, h nats.Header) (context.Context, trace.Span) {
	if !t.Tracing() {
		return ctx, offSpan
	}
	return t.start(ctx, "authz apply", h, trace.SpanKindConsumer, messaging)
}

// BatchFinished counts a batch whose terminal outcome authz recorded, once
// per batch, and names it on ctx's span.
func (t *Telemetry) BatchFinished(ctx context.Context, b *pipeline.Batch, o pipeline.Outcome) {
	if t == nil {
		return
	}
	t.m.finished.WithLabelValues(b.Domain, b.Label, string(o.Status)).Inc()
	if !b.CreatedAt.IsZero() {
		t.m.outcome.WithLabelValues(b.Domain, string(o.Status)).Observe(max(0, time.Since(b.CreatedAt).Seconds()))
	}
	if t.tracer != nil {
		trace.SpanFromContext(ctx).SetAttributes(attrBatchID.Int64(int64(b.ID)), attrDomain.String(b.Domain),
			attrLabel.String(b.Label), attrOutcome.String(string(o.Status)))
	}
}

// CallbackApplied observes the time from a callback's publication to its
// application by authz.
func (t *Telemetry) CallbackApplied(domain string, published time.Time) {
	if t == nil || published.IsZero() {
		return
	}
	t.m.callbackLag.WithLabelValues(domain).Observe(max(0, time.Since(published).Seconds()))
}

// Step is one step of a processor under observation; End it once.
type Step struct {
	t      *Telemetry
	span   trace.Span
	domain string
	prio   string
	start  time.Time
	ticket uint64
}

// StartStep starts observing a step of domain's queue of priority prio,
// whose token's headers are h: it counts as in flight until End, and its
// span continues the batch's trace.
func (t *Telemetry) StartStep(ctx context.Context, domain string, prio pipeline.Priority, h nats.Header) (context.Context, *Step) {
	if t == nil {
		return ctx, nil
	}
	now := time.Now()
	s := &Step{t: t, domain: domain, prio: string(prio), start: now, ticket: t.steps.start(domain, now), span: offSpan}
	if t.tracer != nil {
		ctx, s.span = t.start(ctx, "processor step", h, trace.SpanKindConsumer, messaging,
			attrDomain.String(domain), attrPriority.String(string(prio)))
	}
	return ctx, s
}

// End records what the step did to batch id: its action (one of the
// processor's), its outcome if it finished the batch, and whether it
// failed.
func (s *Step) End(id uint64, action api.Action, outcome string, failed bool) {
	if s == nil {
		return
	}
	t := s.t
	t.steps.done(s.domain, s.ticket)
	t.m.stepSeconds.WithLabelValues(s.domain, s.prio, string(action)).Observe(time.Since(s.start).Seconds())
	if action == api.ActionRetry {
		t.m.retries.WithLabelValues(s.domain).Inc()
	}
	if t.tracer == nil {
		return
	}
	s.span.SetAttributes(attrBatchID.Int64(int64(id)), attrAction.String(string(action)))
	if outcome != "" {
		// The status alone: a reason may quote a handler's error.
		if i := strings.IndexByte(outcome, '('); i >= 0 {
			outcome = outcome[:i]
		}
		s.span.SetAttributes(attrOutcome.String(outcome))
	}
	if failed {
		// The error's text may quote a handler's: only the action is told.
		s.span.SetStatus(codes.Error, "step "+string(action))
	}
	s.span.End()
}

// WatchSteps reports domain's steps in flight from now on, at zero while
// none runs.
func (t *Telemetry) WatchSteps(domain string) {
	if t == nil {
		return
	}
	t.steps.watch(domain)
}

// ThrottleSet reports the steps per second domain's processor allows (0:
// no throttle).
func (t *Telemetry) ThrottleSet(domain string, stepsPerSecond int) {
	if t == nil {
		return
	}
	t.m.throttle.WithLabelValues(domain).Set(float64(stepsPerSecond))
}

// Throttled counts a tick of domain cut short by its throttle.
func (t *Telemetry) Throttled(domain string) {
	if t == nil {
		return
	}
	t.m.throttled.WithLabelValues(domain).Inc()
}

// WaitingForWorker counts a batch of domain that began to wait for a
// worker to attempt its call of function type typ (empty: an atomic unit).
func (t *Telemetry) WaitingForWorker(domain, typ string) {
	if t == nil {
		return
	}
	t.m.waiting.WithLabelValues(domain, typ).Inc()
}

// FallbackUsed counts a failed function of domain whose fallback handled
// the failure.
func (t *Telemetry) FallbackUsed(domain string) {
	if t == nil {
		return
	}
	t.m.fallbacks.WithLabelValues(domain).Inc()
}

// Call is one work request a worker runs under observation; End it once.
type Call struct {
	t      *Telemetry
	span   trace.Span
	ticket uint64
}

// StartCall starts observing work request req of worker name, whose
// message headers are h: it counts as in flight until End, and its span
// continues the batch's trace.
func (t *Telemetry) StartCall(ctx context.Context, name string, req *records.WorkRequest, h nats.Header) (context.Context, *Call) {
	if t == nil {
		return ctx, nil
	}
	c := &Call{t: t, ticket: t.calls.start("", time.Now()), span: offSpan}
	if t.tracer != nil {
		typ, index := "", -1
		if len(req.Calls) > 0 {
			typ, index = req.Calls[0].Type, req.Calls[0].Index
		}
		ctx, c.span = t.start(ctx, "worker call", h, trace.SpanKindServer, messaging,
			attrWorker.String(name), attrBatchID.Int64(int64(req.BatchID)), attrDomain.String(req.Domain),
			attrLabel.String(req.Label), attrType.String(typ), attrIndex.Int(index), attrAttempt.Int(req.Attempt),
			attrUnit.Bool(req.Unit))
	}
	return ctx, c
}

// End records the reply of the call: failed says whether it carries an error.
func (c *Call) End(failed bool) {
	if c == nil {
		return
	}
	c.t.calls.done("", c.ticket)
	if failed {
		c.span.SetStatus(codes.Error, "the call failed")
	}
	c.span.End()
}

// WatchCalls reports the worker's calls in flight from now on, at zero
// while none runs.
func (t *Telemetry) WatchCalls() {
	if t == nil {
		return
	}
	t.calls.watch("")
}

// Handler kinds, the kind label of tickflow_worker_handler_seconds.
const (
	KindFunction = "function"
	KindFallback = "fallback"
)

// HandlerDone observes a handler call of function type typ (one the worker
// has a handler for) and kind, started at start, that returned err.
func (t *Telemetry) HandlerDone(typ, kind string, start time.Time, err error) {
	if t == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	t.m.handler.WithLabelValues(typ, kind, result).Observe(time.Since(start).Seconds())
}

// WorkerBusy counts a request answered busy.
func (t *Telemetry) WorkerBusy() {
	if t == nil {
		return
	}
	t.m.workerBusy.Inc()
}

// TickPublished counts a tick of domain (one the ticker was configured
// with), published or failed.
func (t *Telemetry) TickPublished(domain string, err error) {
	if t == nil {
		return
	}
	result := "published"
	if err != nil {
		result = "failed"
	}
	t.m.ticks.WithLabelValues(domain, result).Inc()
}

var _ prometheus.Collector = (*inflight)(nil)
