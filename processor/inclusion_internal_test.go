package processor

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// The inclusion waits' writes go through the stepper (save, keep,
// functionFailed), which needs the whole processor; these tests cover what
// inclusions decides without one: the poll delay, which confirmations it
// drops, a wait that stays parked, and the failure hook. A test whose
// inclusions has no stepper proves the path writes nothing: one that
// reached a write would panic.

// parkedBatch is batch id with function 0 of type typ waiting for the
// inclusion of dispatch ref until deadline, polled every pollEvery.
func parkedBatch(id uint64, typ, ref string, pollEvery time.Duration, deadline time.Time) (*pipeline.Batch, *state) {
	b := batchOf(id)
	b.Functions = []pipeline.Function{{Type: typ, Payload: payloadOf("p"), Inclusion: &pipeline.Inclusion{
		PollEvery: pipeline.Duration(pollEvery), MaxWait: pipeline.Duration(time.Hour), By: []string{"oracle"},
	}}}
	st := &state{}
	st.Progress = records.Progress{BatchID: id, State: records.Parked, Failures: []int{1}, Rounds: []int{2}, LastError: "earlier",
		Parked: &records.ParkedFunction{Index: 0, Deadline: deadline, Output: pipeline.Output{Index: 0, Type: typ, Ref: ref}}}
	return b, st
}

// newInclusions is inclusions without a stepper, over the processor's
// connection, at partsNow.
func newInclusions(p *parts) *inclusions {
	return &inclusions{
		workers: &workClient{nc: p.nc, timeout: 10 * time.Second}, senders: &senderPool{},
		now: func() time.Time { return partsNow }, rand: func() float64 { return 0.5 }, log: slog.New(slog.DiscardHandler),
	}
}

// TestPollDelay: a parked token comes back at the next poll, or at the
// deadline when that is sooner, and never at once.
func TestPollDelay(t *testing.T) {
	tests := []struct {
		name      string
		pollEvery time.Duration
		left      time.Duration
		want      time.Duration
	}{
		{name: "the poll interval", pollEvery: time.Second, left: time.Minute, want: time.Second},
		{name: "the deadline is sooner", pollEvery: time.Minute, left: time.Second, want: time.Second},
		{name: "no polling: at the deadline", left: time.Minute, want: time.Minute},
		{name: "past the deadline: a moment", pollEvery: time.Second, left: -time.Minute, want: time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inc := &pipeline.Inclusion{PollEvery: pipeline.Duration(tt.pollEvery)}
			if got := pollDelay(inc, partsNow.Add(tt.left), partsNow); got != tt.want {
				t.Fatalf("pollDelay = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestInclusionsConfirmDropped: a confirmation by someone the function
// does not name, about another dispatch, of a failure after the inclusion
// was saved, or that says neither included nor failed, is dropped before
// anything is written.
func TestInclusionsConfirmDropped(t *testing.T) {
	iw := &inclusions{senders: &senderPool{}}
	tests := []struct {
		name     string
		conf     records.Confirmation
		included bool
		why      string
	}{
		{name: "someone not named", conf: records.Confirmation{Content: pipeline.ConfirmIncluded, By: "mallory", Ref: "tx2"}, why: `"mallory" may not confirm`},
		{name: "an earlier dispatch", conf: records.Confirmation{Content: pipeline.ConfirmIncluded, By: "oracle", Ref: "tx1"}, why: `dispatch "tx1"`},
		{name: "a failure too late", conf: records.Confirmation{Content: pipeline.ConfirmFailed + ": reverted", By: "oracle", Ref: "tx2"}, included: true, why: "comes too late"},
		{name: "neither included nor failed", conf: records.Confirmation{Content: "maybe", By: "oracle", Ref: "tx2"}, why: `confirmed with "maybe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, st := parkedBatch(5, "pay", "tx2", 0, partsNow.Add(time.Hour))
			st.Progress.Parked.Included = tt.included
			err := iw.confirm(t.Context(), b, st, 0, tt.conf)
			if !errors.Is(err, errDropConfirmation) || !strings.Contains(err.Error(), tt.why) {
				t.Fatalf("confirm = %v, want it dropped saying %q", err, tt.why)
			}
		})
	}
}

// TestInclusionsAwaitStillParked: a parked function's token that finds
// it neither included nor failed before its deadline asks the worker's
// Poller about the parked dispatch, and goes back to wait for the next
// poll; a poll no worker attempted, or one the handler cannot answer,
// changes nothing either.
func TestInclusionsAwaitStillParked(t *testing.T) {
	p := startParts(t)
	iw := newInclusions(p)
	tests := []struct {
		name  string
		serve func(*nats.Msg) workAnswer // nil: no worker polls
	}{
		{name: "not included yet", serve: replyWith(records.WorkReply{})},
		{name: "the poll not attempted"},
		{name: "the handler cannot poll", serve: replyWith(records.WorkReply{Error: &records.WorkError{NoHook: true}})},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ := "chain" + string(rune('a'+i))
			polls := make(chan records.WorkRequest, 4)
			if tt.serve != nil {
				p.serve(t, streams.PollSubject(typ), func(m *nats.Msg) workAnswer {
					polls <- must(records.Decode[records.WorkRequest](m.Data))
					return tt.serve(m)
				})
			}
			b, st := parkedBatch(uint64(10+i), typ, "tx2", 200*time.Millisecond, partsNow.Add(time.Hour))
			m := p.take(t, b)
			action, err := iw.await(p.ctx, b, st, m)
			if err != nil || action != api.ActionParked {
				t.Fatalf("await = %s, %v; want parked", action, err)
			}
			p.redelivered(t, streams.BatchKey(b.ID))
			if tt.serve == nil {
				return
			}
			req := <-polls
			if req.BatchID != b.ID || req.Inclusion == nil || req.Inclusion.Ref != "tx2" || req.Inclusion.Hook != "" ||
				req.Attempt != 2 || req.Round != 2 || len(req.Calls) != 1 || req.Calls[0].Type != typ {
				t.Fatalf("poll request %+v (inclusion %+v)", req, req.Inclusion)
			}
		})
	}
}

// TestInclusionsFailureHook: a function waiting for inclusion that is
// given up on has its failure hook called once, with the failure; any
// other function has none, and a hook no worker serves is an error that
// asks again later.
func TestInclusionsFailureHook(t *testing.T) {
	p := startParts(t)
	iw := newInclusions(p)
	hooks := make(chan records.WorkRequest, 4)
	p.serve(t, streams.HookSubject("served"), func(m *nats.Msg) workAnswer {
		hooks <- must(records.Decode[records.WorkRequest](m.Data))
		return workAnswer{body: must(records.Encode(&records.WorkReply{Error: &records.WorkError{Message: "refused"}}))}
	})
	b, st := parkedBatch(7, "served", "tx2", 0, partsNow.Add(time.Hour))
	st.sender = "s1"
	if err := iw.failureHook(p.ctx, b, st, failure{index: 0, exhausted: true}); err != nil {
		t.Fatalf("a refused hook: %v, want nil (logged)", err)
	}
	req := <-hooks
	f := req.Failure
	if req.Inclusion == nil || req.Inclusion.Hook != records.HookFailure || req.Sender != "s1" || req.Attempt != 2 ||
		f == nil || f.BatchID != 7 || f.Index != 0 || f.Failures != 1 || f.LastError != "earlier" || !f.Exhausted {
		t.Fatalf("hook request %+v, inclusion %+v, failure %+v", req, req.Inclusion, f)
	}

	unserved, st2 := parkedBatch(8, "unserved", "tx2", 0, partsNow.Add(time.Hour))
	if err := iw.failureHook(p.ctx, unserved, st2, failure{index: 0}); !errors.Is(err, errNoWorker) || !notAttempted(err) {
		t.Fatalf("a hook no worker serves: %v, want errNoWorker", err)
	}
	// None of these has a hook to call: no request goes out (no worker
	// serves them, so one would fail).
	atomic, st3 := parkedBatch(9, "unserved", "tx2", 0, partsNow.Add(time.Hour))
	atomic.Subroutine.Mode = pipeline.Atomic
	plain := batchOf(10)
	for _, c := range []struct {
		name string
		b    *pipeline.Batch
		f    failure
	}{
		{name: "an atomic unit", b: atomic, f: failure{index: 0}},
		{name: "a function without inclusion", b: plain, f: failure{index: 0}},
		{name: "no function", b: unserved, f: failure{index: -1}},
		{name: "past the last function", b: unserved, f: failure{index: 1}},
	} {
		if err := iw.failureHook(p.ctx, c.b, st3, c.f); err != nil {
			t.Fatalf("%s: %v, want no hook", c.name, err)
		}
	}
}
