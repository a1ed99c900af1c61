package authz

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/internal/drain"
)

// dueForwarder is the loop that takes the schedules that fired off their
// consumer and forwards each to its batch's queue
// (scheduledBatches.forwardDue).
type dueForwarder struct {
	batches *scheduledBatches
	due     jetstream.Consumer
	// gate admits the fired schedules delivered until shutdown, so that
	// run waits for their forwarding.
	gate drain.Gate
	dc   jetstream.ConsumeContext
}

// forwardWait bounds the forwarding of one fired schedule.
const forwardWait = 30 * time.Second

// start begins taking fired schedules.
func (f *dueForwarder) start(ctx context.Context) error {
	dc, err := f.due.Consume(func(m jetstream.Msg) {
		if !f.gate.Enter() {
			return // redelivered after AckWait
		}
		defer f.gate.Leave()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forwardWait)
		defer cancel()
		f.batches.forwardDue(fctx, m)
	})
	if err != nil {
		return fmt.Errorf("authz: consume fired schedules: %w", err)
	}
	f.dc = dc
	return nil
}

// run waits for ctx to end, then stops taking fired schedules and returns
// once those delivered are forwarded.
func (f *dueForwarder) run(ctx context.Context) error {
	<-ctx.Done()
	f.dc.Drain()
	<-f.dc.Closed()
	f.gate.Close()
	f.gate.Wait()
	return nil
}
