package processor

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// observe registers the processor with its telemetry, if any: its
// readiness (connected, its consumers and buckets present), its domain's
// queue depths and dead letters, and its steps in flight.
func (p *Processor) observe(nc *nats.Conn) {
	t := p.opts.Telemetry
	if t == nil {
		return
	}
	d := p.opts.Domain
	name := streams.ProcessorConsumer(d)
	t.AddReadiness("processor "+d, nc, telemetry.Resources{
		Buckets: []string{streams.BucketProgress, streams.BucketBatches, streams.BucketDomainStates},
		Consumers: []telemetry.Consumer{
			{Stream: streams.QueueStream(pipeline.High), Name: name},
			{Stream: streams.QueueStream(pipeline.Med), Name: name},
			{Stream: streams.StreamConfirm, Name: name},
		},
	})
	t.WatchQueues(p.js, d)
	t.WatchSteps(d)
	t.ThrottleSet(d, p.opts.Throttle)
}

// observedStep is step, timed, counted in flight and traced when the
// processor has telemetry.
func (p *Processor) observedStep(ctx context.Context, prio pipeline.Priority, m *deferred) api.StepReport {
	t := p.opts.Telemetry
	if t == nil {
		return p.steps.step(ctx, prio, m)
	}
	ctx, s := t.StartStep(ctx, p.opts.Domain, prio, m.Headers())
	sr := p.steps.step(ctx, prio, m)
	s.End(sr.BatchID, sr.Action, sr.Outcome, sr.Action == api.ActionError || sr.Action == api.ActionAbandoned)
	return sr
}
