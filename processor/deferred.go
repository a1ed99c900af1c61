package processor

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/telemetry"
)

// pubAckTimeout bounds the wait for the PubAck of an asynchronous publish:
// past it the write counts as failed and its token is put back.
const pubAckTimeout = 5 * time.Second

// deferred is a token taken by a tick. The last write of its step (the
// callback of a finished batch, the token of a rotated one) is published
// asynchronously, and the token is acknowledged only when that write's
// PubAck arrives: the step ends without waiting a round trip, and the
// token is never acknowledged before what it leads to is stored.
type deferred struct {
	jetstream.Msg
	// write is the PubAck the acknowledgement waits for; nil when the step
	// settled its token itself.
	write pendingWrite
	what  string
}

// pendingWrite is a write whose PubAck a token's acknowledgement waits
// for: a message of its own (*jsapi.PendingAck) or a callback that
// travels with others (*groupMember).
type pendingWrite interface {
	Done() <-chan struct{}
	Result() (uint64, error)
	Deadline() time.Time
	Forget()
}

// thenAck publishes msg and acknowledges the token m once msg is
// stored, with the crash point fault in between. A token taken by a tick
// (deferred) is acknowledged by the tick's acker when the PubAck arrives;
// any other is acknowledged after a synchronous publish. m may be nil (a
// confirmation has no token): then msg is published synchronously.
func (pb *publisher) thenAck(ctx context.Context, msg *nats.Msg, m jetstream.Msg, what, fault string) error {
	telemetry.Inject(ctx, msg.Header)
	if d, ok := m.(*deferred); ok {
		f, err := pb.async.Publish(msg)
		if err != nil {
			return fmt.Errorf("processor: %s: %w", what, err)
		}
		if err := pb.fault.at(fault); err != nil {
			f.Forget()
			return err
		}
		d.write, d.what = f, what
		return nil
	}
	if _, err := pb.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("processor: %s: %w", what, err)
	}
	if err := pb.fault.at(fault); err != nil {
		return err
	}
	if m == nil {
		return nil
	}
	return m.Ack()
}

// callbackThenAck publishes the terminal callback msg (streams.CallbackMsg)
// and acknowledges the token m once it is stored, as thenAck does. With
// group set, the callback of a token taken by a tick goes with the others
// that end meanwhile (callbackGrouper); without, alone, deduplicated by
// its id.
func (pb *publisher) callbackThenAck(ctx context.Context, msg *nats.Msg, m jetstream.Msg, what string, group bool) error {
	d, ok := m.(*deferred)
	if !ok || !group || pb.groups == nil {
		return pb.thenAck(ctx, msg, m, what, faultAfterCallback)
	}
	telemetry.Inject(ctx, msg.Header)
	w := pb.groups.add(msg)
	if err := pb.fault.at(faultAfterCallback); err != nil {
		return err
	}
	d.write, d.what = w, what
	return nil
}

// acker acknowledges the tokens of a tick whose last write was published
// asynchronously, in the order their steps ended, each once its PubAck
// arrived; a write that failed puts its token back for a redelivery soon
// and turns its step's report into an error. It is owned by one tick,
// which closes it and waits for it before reporting. Its goroutine starts
// with the first token handed over: a tick with none costs nothing.
type acker struct {
	log *slog.Logger
	// qmu guards queue, closed and started.
	qmu     sync.Mutex
	queue   []ackItem
	closed  bool
	started bool
	// wake tells the goroutine that the queue grew or the acker closed.
	wake chan struct{}
	done chan struct{}
	// mu guards the report the acker corrects.
	mu  *sync.Mutex
	rep *api.TickReport
}

type ackItem struct {
	d    *deferred
	step int // index of the step's report
}

// startAcker returns the acker of a tick, which corrects rep (guarded by
// mu).
func startAcker(log *slog.Logger, mu *sync.Mutex, rep *api.TickReport) *acker {
	return &acker{log: log, mu: mu, rep: rep}
}

func (a *acker) run() {
	defer close(a.done)
	// One timer bounds every wait, each to its write's deadline.
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		a.qmu.Lock()
		items, closed := a.queue, a.closed
		a.queue = nil
		a.qmu.Unlock()
		if len(items) == 0 {
			if closed {
				return
			}
			<-a.wake
			continue
		}
		for _, it := range items {
			a.settle(it, &timer)
		}
	}
}

// settle acknowledges the token of it once its write is stored, or puts it
// back.
func (a *acker) settle(it ackItem, timer **time.Timer) {
	err := a.wait(it.d.write, timer)
	if err == nil {
		err = it.d.Ack()
	} else {
		a.log.Warn("write not stored; token redelivered shortly", "write", it.d.what, "err", err)
		_ = it.d.NakWithDelay(time.Second)
		err = fmt.Errorf("processor: %s: %w", it.d.what, err)
	}
	if err != nil {
		a.mu.Lock()
		a.rep.Steps[it.step].Action, a.rep.Steps[it.step].Error = api.ActionError, err.Error()
		a.mu.Unlock()
	}
}

// wait waits for the PubAck of w until its deadline, with *timer (made on
// the first wait that has to).
func (a *acker) wait(w pendingWrite, timer **time.Timer) error {
	select {
	case <-w.Done():
		_, err := w.Result()
		return err
	default:
	}
	if *timer == nil {
		*timer = time.NewTimer(time.Until(w.Deadline()))
	} else {
		(*timer).Reset(time.Until(w.Deadline()))
	}
	select {
	case <-w.Done():
		_, err := w.Result()
		return err
	case <-(*timer).C:
		w.Forget()
		return fmt.Errorf("%w (%s)", jsapi.ErrPubAckTimeout, pubAckTimeout)
	}
}

// add hands over the token of step i, if its acknowledgement waits for a write.
func (a *acker) add(d *deferred, i int) {
	if d.write == nil {
		return
	}
	a.qmu.Lock()
	a.queue = append(a.queue, ackItem{d: d, step: i})
	if !a.started {
		a.started = true
		a.wake, a.done = make(chan struct{}, 1), make(chan struct{})
		go a.run()
	}
	a.qmu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// close waits until every token handed over is settled.
func (a *acker) close() {
	a.qmu.Lock()
	a.closed = true
	started := a.started
	a.qmu.Unlock()
	if !started {
		return
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
	<-a.done
}
