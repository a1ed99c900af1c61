package processor

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// unitLog records the requests a worker got on streams.WorkUnitsSubject:
// the batch ids of each one's units, in order, and its deadline header.
type unitLog struct {
	mu        sync.Mutex
	requests  [][]uint64
	deadlines []string
}

func (l *unitLog) sent() ([][]uint64, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.requests), slices.Clone(l.deadlines)
}

// ranOutput is the output a worker answers a unit of batch id with: one
// output per call, its data the batch id, so that each unit's answer tells
// whose it is.
func ranOutput(req *records.WorkRequest, via string) []pipeline.Output {
	c := req.Calls[0]
	return []pipeline.Output{{Index: c.Index, Type: c.Type, Data: payloadOf(via + strconv.FormatUint(req.BatchID, 10))}}
}

// ranUnits answers every unit of a request on streams.WorkUnitsSubject as
// run (ranOutput), and logs the request.
func ranUnits(l *unitLog) func(m *nats.Msg) workAnswer {
	return func(m *nats.Msg) workAnswer {
		wb := must(records.Decode[records.WorkBatch](m.Data))
		rep := &records.WorkBatchReply{}
		var ids []uint64
		for i := range wb.Units {
			ids = append(ids, wb.Units[i].BatchID)
			rep.Replies = append(rep.Replies, records.WorkReply{Outputs: ranOutput(&wb.Units[i], "batch ")})
		}
		l.mu.Lock()
		l.requests = append(l.requests, ids)
		l.deadlines = append(l.deadlines, m.Header.Get(streams.HeaderDeadline))
		l.mu.Unlock()
		return workAnswer{body: must(records.Encode(rep))}
	}
}

// payloadOf is s as a payload.
func payloadOf(s string) pipeline.Payload { return must(pipeline.EncodePayload(s)) }

// unitRequest is the atomic unit of batch id, its first call at index.
func unitRequest(id uint64, index int) *records.WorkRequest {
	return &records.WorkRequest{BatchID: id, Domain: partsDomain, Unit: true, Calls: []records.WorkCall{{Index: index, Type: "noop"}}}
}

// newBatcher is a unit batcher over the processor's connection, with
// work timeout timeout.
func newBatcher(p *parts, timeout time.Duration) *unitBatcher {
	return &unitBatcher{workers: &workClient{nc: p.nc, timeout: timeout}}
}

// queuedUnits are the units of batches ids, waiting, as run queues them.
func queuedUnits(timeout time.Duration, ids ...uint64) []*queuedUnit {
	out := make([]*queuedUnit, len(ids))
	for i, id := range ids {
		out[i] = &queuedUnit{req: unitRequest(id, i), deadline: time.Now().Add(timeout), ch: make(chan unitEvent, 2)}
	}
	return out
}

// eventOf waits for u's next event.
func eventOf(t *testing.T, u *queuedUnit) unitEvent {
	t.Helper()
	ev, ok := testnats.Receive(u.ch, 10*time.Second)
	if !ok {
		t.Fatalf("the unit of batch %d got no answer", u.req.BatchID)
	}
	return ev
}

// ranAs checks that rep is the answer of the unit of batch id as ranOutput
// gives it.
func ranAs(t *testing.T, rep *records.WorkReply, err error, id uint64, via string) {
	t.Helper()
	want := via + strconv.FormatUint(id, 10)
	if err != nil || rep == nil || rep.Error != nil || len(rep.Outputs) != 1 || string(rep.Outputs[0].Data) != string(payloadOf(want)) {
		t.Fatalf("unit of batch %d answered %+v, %v; want its output %q", id, rep, err, want)
	}
}

// TestUnitBatcherLoneUnit: an idle processor's unit goes at once, alone,
// on the batch endpoint, with the work timeout's deadline in its header,
// and gets its answer; the flight ends with it.
func TestUnitBatcherLoneUnit(t *testing.T) {
	p := startParts(t)
	var log unitLog
	p.serve(t, streams.WorkUnitsSubject, ranUnits(&log))
	q := newBatcher(p, 10*time.Second)
	before := time.Now()
	rep, err := q.run(p.ctx, unitRequest(1, 0))
	after := time.Now()
	ranAs(t, rep, err, 1, "batch ")
	requests, deadlines := log.sent()
	if !slices.EqualFunc(requests, [][]uint64{{1}}, slices.Equal) {
		t.Fatalf("requests of units %v, want one of batch 1", requests)
	}
	d, err := strconv.ParseInt(deadlines[0], 10, 64)
	if err != nil || d < before.Add(10*time.Second).UnixNano() || d > after.Add(10*time.Second).UnixNano() {
		t.Fatalf("deadline header %q, want the work timeout from the request", deadlines[0])
	}
	if q.flights != 0 || len(q.waiting) != 0 {
		t.Fatalf("after the unit: %d flights, %d waiting", q.flights, len(q.waiting))
	}
}

// TestUnitBatcherFlyTakes64: a flight takes the 64 oldest units waiting
// in one request, under the earliest of their deadlines, gives each its
// own answer, and asks the 65th's step to send the next request; that
// one ends the flight.
func TestUnitBatcherFlyTakes64(t *testing.T) {
	p := startParts(t)
	var log unitLog
	p.serve(t, streams.WorkUnitsSubject, ranUnits(&log))
	q := newBatcher(p, 10*time.Second)
	us := queuedUnits(10*time.Second, runOf(1, 65)...)
	us[5].deadline = time.Now().Add(3 * time.Second)
	q.waiting, q.flights = slices.Clone(us), 1
	us[0].led = true
	q.fly(p.ctx)
	for _, u := range us[:64] {
		ev := eventOf(t, u)
		ranAs(t, ev.rep, ev.err, u.req.BatchID, "batch ")
	}
	if ev := eventOf(t, us[64]); !ev.lead || !us[64].led {
		t.Fatalf("the 65th unit got %+v, want to lead the next request", ev)
	}
	if q.flights != 1 || len(q.waiting) != 1 {
		t.Fatalf("after the first request: %d flights, %d waiting; want the lead handed over and the 65th waiting", q.flights, len(q.waiting))
	}
	q.fly(p.ctx)
	ev := eventOf(t, us[64])
	ranAs(t, ev.rep, ev.err, 65, "batch ")
	requests, deadlines := log.sent()
	if want := [][]uint64{runOf(1, 64), {65}}; !slices.EqualFunc(requests, want, slices.Equal) {
		t.Fatalf("requests of units %v, want %v", requests, want)
	}
	if want := strconv.FormatInt(us[5].deadline.UnixNano(), 10); deadlines[0] != want {
		t.Fatalf("the request's deadline %s, want its earliest unit's %s", deadlines[0], want)
	}
	if q.flights != 0 || len(q.waiting) != 0 {
		t.Fatalf("after the last request: %d flights, %d waiting", q.flights, len(q.waiting))
	}
}

// TestUnitBatcherAnswers: what each unit of a request gets for each way a
// worker may answer it, or not.
func TestUnitBatcherAnswers(t *testing.T) {
	refuse := func(code string) func(*nats.Msg) workAnswer {
		return func(*nats.Msg) workAnswer { return workAnswer{code: code, desc: "no"} }
	}
	replies := func(reps ...records.WorkReply) func(*nats.Msg) workAnswer {
		return func(*nats.Msg) workAnswer {
			return workAnswer{body: must(records.Encode(&records.WorkBatchReply{Replies: reps}))}
		}
	}
	alone := func(m *nats.Msg) workAnswer {
		req := must(records.Decode[records.WorkRequest](m.Data))
		return workAnswer{body: must(records.Encode(&records.WorkReply{Outputs: ranOutput(&req, "alone ")}))}
	}
	ran := func(via string) func(*testing.T, int, unitEvent) {
		return func(t *testing.T, i int, ev unitEvent) { ranAs(t, ev.rep, ev.err, uint64(i+1), via) }
	}
	failed := func(match func(error) bool) func(*testing.T, int, unitEvent) {
		return func(t *testing.T, i int, ev unitEvent) {
			if ev.rep != nil || !match(ev.err) {
				t.Fatalf("unit %d: %+v, %v", i, ev.rep, ev.err)
			}
		}
	}
	tests := []struct {
		name    string
		unit    func(m *nats.Msg) workAnswer // on streams.WorkUnitSubject
		serve   func(m *nats.Msg) workAnswer // on streams.WorkUnitsSubject
		payload int
		timeout time.Duration
		check   func(t *testing.T, i int, ev unitEvent)
	}{
		{name: "each unit its reply", serve: replies(
			records.WorkReply{Outputs: []pipeline.Output{{Type: "noop", Data: payloadOf("batch 1")}}},
			records.WorkReply{Outputs: []pipeline.Output{{Type: "noop", Data: payloadOf("batch 2")}}}),
			check: ran("batch ")},
		{name: "a worker stopping: not attempted", serve: refuse(streams.WorkCodeUnavailable),
			check: failed(func(err error) bool { return errors.Is(err, errBusy) && notAttempted(err) })},
		{name: "a request refused: each unit fails permanently at its own index", serve: refuse(streams.WorkCodeBadRequest),
			check: func(t *testing.T, i int, ev unitEvent) {
				if ev.err != nil || ev.rep.Error == nil || !ev.rep.Error.Permanent || ev.rep.Error.Index != i || ev.rep.Error.Message != "worker refused the request: no" {
					t.Fatalf("unit %d: %+v, %v; want a permanent refusal at index %d", i, ev.rep, ev.err, i)
				}
			}},
		{name: "too few replies: every unit fails", serve: replies(records.WorkReply{}),
			check: failed(func(err error) bool {
				return err != nil && !notAttempted(err) && strings.Contains(err.Error(), "answered 1 units of 2")
			})},
		{name: "a unit busy: that one not attempted", serve: replies(
			records.WorkReply{Error: &records.WorkError{Busy: true, Message: "running elsewhere"}},
			records.WorkReply{Outputs: []pipeline.Output{{Type: "noop", Data: payloadOf("batch 2")}}}),
			check: func(t *testing.T, i int, ev unitEvent) {
				if i == 0 {
					failed(func(err error) bool { return errors.Is(err, errBusy) })(t, i, ev)
					return
				}
				ran("batch ")(t, i, ev)
			}},
		{name: "no answer in time", serve: func(*nats.Msg) workAnswer { return workAnswer{silent: true} }, timeout: 200 * time.Millisecond,
			check: failed(func(err error) bool { return errors.Is(err, errNoAnswer) })},
		{name: "no batch endpoint: each unit alone", unit: alone, check: ran("alone ")},
		{name: "too large for one request: each unit alone", unit: alone, serve: replies(), payload: 600 << 10, check: ran("alone ")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := startParts(t)
			if tt.serve != nil {
				p.serve(t, streams.WorkUnitsSubject, tt.serve)
			}
			if tt.unit != nil {
				p.serve(t, streams.WorkUnitSubject, tt.unit)
			}
			timeout := cmp.Or(tt.timeout, 10*time.Second)
			q := newBatcher(p, timeout)
			us := queuedUnits(timeout, 1, 2)
			for _, u := range us {
				u.req.Calls[0].Payload = make(pipeline.Payload, tt.payload)
			}
			q.send(p.ctx, us)
			for i, u := range us {
				tt.check(t, i, eventOf(t, u))
			}
		})
	}
}

// TestUnitBatcherConcurrentSteps: units of many concurrent steps each get
// their own answer; each travels in exactly one request of at most 64,
// and every flight ends.
func TestUnitBatcherConcurrentSteps(t *testing.T) {
	p := startParts(t)
	var log unitLog
	p.serve(t, streams.WorkUnitsSubject, ranUnits(&log))
	q := newBatcher(p, 10*time.Second)
	const steps = 150
	type answer struct {
		rep *records.WorkReply
		err error
	}
	answers := make([]answer, steps)
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i := range steps {
		wg.Go(func() {
			rep, err := q.run(ctx, unitRequest(uint64(i+1), 0))
			answers[i] = answer{rep, err}
		})
	}
	wg.Wait()
	for i, a := range answers {
		ranAs(t, a.rep, a.err, uint64(i+1), "batch ")
	}
	requests, _ := log.sent()
	seen := map[uint64]int{}
	for _, r := range requests {
		if len(r) > maxUnitsPerRequest {
			t.Fatalf("a request of %d units, more than %d", len(r), maxUnitsPerRequest)
		}
		for _, id := range r {
			seen[id]++
		}
	}
	for id := range uint64(steps) {
		if seen[id+1] != 1 {
			t.Fatalf("the unit of batch %d went in %d requests, want 1", id+1, seen[id+1])
		}
	}
	if q.flights != 0 || len(q.waiting) != 0 {
		t.Fatalf("after every step: %d flights, %d waiting", q.flights, len(q.waiting))
	}
	t.Logf("%d units in %d requests", steps, len(requests))
}
