package telemetry_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// BenchmarkOff is what telemetry adds to a step and its publishes when it
// is off: a nil check per hook and a context lookup per message.
func BenchmarkOff(b *testing.B) {
	var tel *telemetry.Telemetry
	ctx := context.Background()
	h := nats.Header{}
	b.ReportAllocs()
	for b.Loop() {
		c, s := tel.StartStep(ctx, "d", pipeline.High, h)
		telemetry.Inject(c, h)
		telemetry.Inject(c, h)
		s.End(1, api.ActionFinished, "Executed", false)
	}
}

// BenchmarkOn is the same with metrics on and tracing off.
func BenchmarkOn(b *testing.B) {
	tel := telemetry.New(telemetry.Options{})
	ctx := context.Background()
	h := nats.Header{}
	b.ReportAllocs()
	for b.Loop() {
		c, s := tel.StartStep(ctx, "d", pipeline.High, h)
		telemetry.Inject(c, h)
		telemetry.Inject(c, h)
		s.End(1, api.ActionFinished, "Executed", false)
	}
}
