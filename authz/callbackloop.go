package authz

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/internal/drain"
)

// callbackConsumer is the loop that takes the processors' callbacks off
// their consumer and hands them to the applier, a group at a time
// (callbackBatcher).
type callbackConsumer struct {
	applier  *callbackApplier
	consumer jetstream.Consumer
	// gate admits the callbacks delivered until shutdown, and the
	// goroutines that apply them, so that run waits for them.
	gate drain.Gate
	cc   jetstream.ConsumeContext
}

// start begins taking callbacks; they are applied with ctx.
func (l *callbackConsumer) start(ctx context.Context) error {
	callbacks := l.applier.newCallbackBatcher(&l.gate)
	cc, err := l.consumer.Consume(func(m jetstream.Msg) {
		// Refused only once the consumer has closed, with its connection:
		// the callback is redelivered after AckWait.
		if !l.gate.Enter() {
			return
		}
		defer l.gate.Leave()
		callbacks.add(ctx, m)
	})
	if err != nil {
		return fmt.Errorf("authz: consume callbacks: %w", err)
	}
	l.cc = cc
	return nil
}

// run waits for ctx to end, then stops taking callbacks and returns once
// every callback already delivered is applied.
func (l *callbackConsumer) run(ctx context.Context) error {
	<-ctx.Done()
	l.cc.Drain()
	// A draining consumer closes once its handler has returned for every
	// message it held.
	<-l.cc.Closed()
	l.gate.Close()
	l.gate.Wait()
	l.applier.held.Close()
	return nil
}
