package permtest

import (
	"testing"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// TestOnlyAuthzEnqueues: of the service identities only authz (and admin,
// which provisions) may publish to batches.> and schedule batches
// (sched.at.>), or put a keeper on a queue (keep.*); for everyone else the
// publish is denied and the stream does not grow.
func TestOnlyAuthzEnqueues(t *testing.T) {
	s := start(t)
	tests := []struct {
		name    string
		allowed bool
	}{
		{name: "admin", allowed: true},
		{name: "authz", allowed: true},
		{name: "processor"},
		{name: "worker"},
		{name: "ticker"},
		{name: "owner"},
		{name: "alice"},
		{name: "bob"},
		{name: "oracle"},
	}
	subjects := []struct {
		stream, subject string
	}{
		{stream: streams.StreamHigh, subject: streams.TokenSubject(pipeline.High, domain)},
		{stream: streams.StreamMed, subject: streams.TokenSubject(pipeline.Med, domain)},
		// A schedule fires into any subject of its stream: whoever may
		// publish one could enqueue through it.
		{stream: streams.StreamScheduled, subject: streams.ScheduleSubject(pipeline.High, domain, 1)},
		// A keeper is taken by no consumer, but it is stored: whoever may
		// publish one could fill the queue's stream.
		{stream: streams.StreamHigh, subject: streams.KeeperSubject(pipeline.High)},
		{stream: streams.StreamMed, subject: streams.KeeperSubject(pipeline.Med)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := s.as(t, tt.name)
			for _, sub := range subjects {
				if tt.allowed {
					r.allowed(t, "enqueue on "+sub.subject, r.publishesTo(sub.stream, sub.subject))
					continue
				}
				s.deniedInto(t, r, sub.stream, sub.subject, r.jsPublish(sub.subject))
			}
		})
	}
}
