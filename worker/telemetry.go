package worker

import (
	"context"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// observed runs a request through its endpoint, counted in flight and
// traced when the worker has telemetry. ctx carries the caller's trace
// context, which serve read from the request's headers.
func (w *Worker) observed(ctx context.Context, req *records.WorkRequest, h endpoint) *records.WorkReply {
	t := w.opts.Telemetry
	if t == nil {
		return h.run(ctx, req)
	}
	ctx, c := t.StartCall(ctx, w.opts.Name, req, nil)
	rep := h.run(ctx, req)
	c.End(rep.Error != nil)
	return rep
}

// observedUnit runs one unit of a request carrying several (runUnits) as
// observed runs a request: in flight and traced, its trace context read
// from the unit itself.
func (w *Worker) observedUnit(ctx context.Context, req *records.WorkRequest) *records.WorkReply {
	t := w.opts.Telemetry
	if t == nil {
		return w.runUnit(ctx, req)
	}
	ctx, c := t.StartCall(t.ExtractMap(ctx, req.Trace), w.opts.Name, req, nil)
	rep := w.runUnit(ctx, req)
	c.End(rep.Error != nil)
	return rep
}

// handle is safeHandle, timed under the call's function type and kind
// (telemetry.KindFunction or telemetry.KindFallback) when the worker has
// telemetry. The type is one the mux has a handler for.
func (w *Worker) handle(ctx context.Context, h pipeline.Handler, call *pipeline.Call, kind string) (pipeline.Result, error) {
	t := w.opts.Telemetry
	if t == nil {
		return safeHandle(ctx, h, call)
	}
	start := time.Now()
	res, err := safeHandle(ctx, h, call)
	t.HandlerDone(call.Type, kind, start, err)
	return res, err
}

// observe registers the worker with its telemetry, if any: its readiness
// (connected, the results bucket present) and its calls in flight.
func (w *Worker) observe() {
	t := w.opts.Telemetry
	if t == nil {
		return
	}
	t.AddReadiness("worker "+w.opts.Name, w.nc, telemetry.Resources{Buckets: []string{streams.BucketResults}})
	t.WatchCalls()
}
