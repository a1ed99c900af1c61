package processor

import (
	"time"

	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// WithFault returns o with its crash-point hook set: f is called at each
// crash point of a step, and a non-nil error abandons the step right there,
// as if the process died.
func WithFault(o Options, f func(point string) error) Options {
	o.fault = f
	return o
}

// The crash points, for the tests that stop a step at one of them.
const (
	FaultAfterWork       = faultAfterWork
	FaultAfterProgress   = faultAfterProgress
	FaultAfterRequeue    = faultAfterRequeue
	FaultAfterDeadLetter = faultAfterDeadLetter
	FaultAfterCallback   = faultAfterCallback
	// FaultAfterCallbackGroup: a message of callbacks is stored, its
	// members' tokens not acknowledged.
	FaultAfterCallbackGroup = faultAfterCallbackGroup
)

// SetFetchSilence makes p's fetches from prio's queue ask consumer (of
// that queue's stream) and end after a silence of d rather than a second;
// an empty consumer restores the processor's own, with the default
// silence. A consumer nobody answers for makes every fetch from that
// queue fall silent, as on a loaded server, while the processor still
// reads its own consumer's state.
func SetFetchSilence(p *Processor, prio pipeline.Priority, consumer string, d time.Duration) {
	if consumer == "" {
		consumer, d = streams.ProcessorConsumer(p.opts.Domain), 0
	}
	p.queues[prio] = jsapi.NewFetcher(p.nc, streams.QueueStream(prio), consumer, d)
}
