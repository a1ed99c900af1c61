package authz

import (
	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// observe registers the service's readiness with its telemetry, if any:
// connected, and every stream, bucket and consumer New binds present.
func (s *Service) observe(nc *nats.Conn) {
	t := s.opts.Telemetry
	if t == nil {
		return
	}
	t.AddReadiness("authz", nc, telemetry.Resources{
		Streams:   []string{streams.QueueStream(pipeline.High), streams.QueueStream(pipeline.Med), streams.StreamDLQ},
		Buckets:   []string{streams.BucketBatches, streams.BucketProgress, streams.BucketDomainStates, streams.BucketLocks},
		Consumers: []telemetry.Consumer{{Stream: streams.StreamCallbacks, Name: streams.CallbacksConsumer}},
	})
}
