package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/telemetry"
)

// maxUnitFlights bounds the unit requests one processor has in flight at
// once; the steps that want a worker meanwhile wait and go together in
// the next request (group commit): a wave of steps costs one round trip,
// and an idle processor sends a lone step at once. A request that stays
// out longer than unitFlightPatience stops counting.
const maxUnitFlights = 2

// maxUnitsPerRequest bounds the atomic units one request carries.
const maxUnitsPerRequest = 64

// unitFlightPatience is how long a unit waits for a request in flight to
// come back before it sends one of its own anyway: a request whose slow
// handler keeps it out holds up only the units it carries, not the steps
// that come after it.
const unitFlightPatience = 5 * time.Millisecond

// unitBatcher sends the atomic units of concurrent steps to the workers
// in waves: the units waiting for a request go together in the next one.
type unitBatcher struct {
	workers *workClient
	tel     *telemetry.Telemetry
	mu      sync.Mutex
	waiting []*queuedUnit
	// flights counts the steps that are sending (or were asked to send) a
	// request for the units waiting.
	flights int
}

type queuedUnit struct {
	req      *records.WorkRequest
	deadline time.Time
	// led: this unit's step was asked to send a request (at most once).
	led bool
	// ch receives a lead event at most once, then the unit's answer.
	ch chan unitEvent
}

type unitEvent struct {
	lead bool
	rep  *records.WorkReply
	err  error
}

// run runs an atomic unit on a worker, as workClient.call does on
// streams.WorkUnitSubject, sending it together with the units other steps
// of this processor want run meanwhile (streams.WorkUnitsSubject): each
// unit keeps its own completion key, claim and answer, so what a worker
// does for it, and what its answer means, is what call would give.
func (q *unitBatcher) run(ctx context.Context, req *records.WorkRequest) (*records.WorkReply, error) {
	// The request may carry other steps' units: this one's trace context
	// travels in its body.
	req.Trace = q.tel.InjectMap(ctx)
	u := &queuedUnit{req: req, deadline: time.Now().Add(q.workers.timeout), ch: make(chan unitEvent, 2)}
	q.mu.Lock()
	q.waiting = append(q.waiting, u)
	led := q.flights < maxUnitFlights
	if led {
		q.flights++
		u.led = true
		u.ch <- unitEvent{lead: true}
	}
	q.mu.Unlock()
	// A unit whose step sends the request itself has nobody to lose
	// patience with: no timer.
	var patience <-chan time.Time
	if !led {
		t := time.NewTimer(unitFlightPatience)
		defer t.Stop()
		patience = t.C
	}
	for {
		select {
		case ev := <-u.ch:
			if !ev.lead {
				return ev.rep, ev.err
			}
			q.fly(ctx)
		case <-patience:
			if q.lead(u) {
				q.fly(ctx)
			}
		}
	}
}

// lead makes u's step send a request, beyond maxUnitFlights, unless it was
// asked to already.
func (q *unitBatcher) lead(u *queuedUnit) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if u.led {
		return false
	}
	u.led = true
	q.flights++
	return true
}

// fly sends one request for the units waiting (the oldest first),
// hands their answers over, and then asks a waiting unit's step to send
// the next request, or ends the flight.
func (q *unitBatcher) fly(ctx context.Context) {
	q.mu.Lock()
	n := min(len(q.waiting), maxUnitsPerRequest)
	batch := q.waiting[:n:n]
	q.waiting = q.waiting[n:]
	q.mu.Unlock()
	if n > 0 {
		q.send(ctx, batch)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, u := range q.waiting {
		if !u.led {
			u.led = true
			u.ch <- unitEvent{lead: true}
			return
		}
	}
	q.flights--
}

// send asks a worker to run batch and gives each unit its answer. A
// lone unit goes the same way: the batch endpoint writes its claim and
// record pipelined, which costs the worker less than the unit endpoint's
// two requests to the results bucket.
func (q *unitBatcher) send(ctx context.Context, batch []*queuedUnit) {
	reps, err := q.request(ctx, batch)
	if errors.Is(err, errUnitsUnserved) {
		// Workers without the batch endpoint, or a request too large:
		// each unit on its own.
		var wg sync.WaitGroup
		for _, u := range batch {
			wg.Go(func() {
				// Under the unit's own trace, not the flying step's.
				rep, err := q.workers.call(q.tel.ExtractMap(ctx, u.req.Trace), streams.WorkUnitSubject, u.req)
				u.ch <- unitEvent{rep: rep, err: err}
			})
		}
		wg.Wait()
		return
	}
	for i, u := range batch {
		ev := unitEvent{err: err}
		if err == nil {
			ev.rep, ev.err = answerOf(&reps[i])
		}
		u.ch <- ev
	}
}

// errUnitsUnserved: the batch could not be sent as one request; its units
// go one by one.
var errUnitsUnserved = errors.New("processor: units not served in one request")

// request sends batch as one request and returns one reply per unit,
// or an error that applies to every unit: notAttempted ones (no answer,
// busy), errUnitsUnserved, or a failure of the request itself.
func (q *unitBatcher) request(ctx context.Context, batch []*queuedUnit) ([]records.WorkReply, error) {
	wb := &records.WorkBatch{Units: make([]records.WorkRequest, len(batch))}
	deadline := batch[0].deadline
	for i, u := range batch {
		wb.Units[i] = *u.req
		if u.deadline.Before(deadline) {
			deadline = u.deadline
		}
	}
	data, err := records.Encode(wb)
	if err != nil {
		return nil, err
	}
	if len(data) > int(q.workers.nc.MaxPayload()) {
		return nil, errUnitsUnserved
	}
	msg := nats.NewMsg(streams.WorkUnitsSubject)
	msg.Data = data
	msg.Header.Set(streams.HeaderDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	resp, err := q.workers.nc.RequestMsgWithContext(rctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrMaxPayload):
		return nil, errUnitsUnserved
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w within %s: %s", errNoAnswer, q.workers.timeout, streams.WorkUnitsSubject)
	case err != nil:
		return nil, fmt.Errorf("processor: work request %s: %w", streams.WorkUnitsSubject, err)
	}
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		desc := resp.Header.Get(micro.ErrorHeader)
		if code == streams.WorkCodeUnavailable {
			return nil, fmt.Errorf("%w: worker unavailable: %s", errBusy, desc)
		}
		reps := make([]records.WorkReply, len(batch))
		for i, u := range batch {
			index := 0
			if len(u.req.Calls) > 0 {
				index = u.req.Calls[0].Index
			}
			reps[i].Error = &records.WorkError{Message: "worker refused the request: " + desc, Permanent: true, Index: index}
		}
		return reps, nil
	}
	rep, err := records.Decode[records.WorkBatchReply](resp.Data)
	if err != nil {
		return nil, err
	}
	if len(rep.Replies) != len(batch) {
		return nil, fmt.Errorf("processor: %s answered %d units of %d", streams.WorkUnitsSubject, len(rep.Replies), len(batch))
	}
	return rep.Replies, nil
}
