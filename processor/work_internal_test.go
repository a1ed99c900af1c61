package processor

import (
	"cmp"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// replyWith answers a work request with rep.
func replyWith(rep records.WorkReply) func(*nats.Msg) workAnswer {
	return func(*nats.Msg) workAnswer { return workAnswer{body: must(records.Encode(&rep))} }
}

// TestWorkClientCall: what a step gets for each way a worker answers a
// request, or does not; only a handler's answer counts as an attempt.
func TestWorkClientCall(t *testing.T) {
	p := startParts(t)
	tests := []struct {
		name    string
		serve   func(*nats.Msg) workAnswer // nil: no worker at all
		payload int
		timeout time.Duration
		want    func(rep *records.WorkReply, err error) bool
	}{
		{name: "the handler's outputs", serve: replyWith(records.WorkReply{Outputs: []pipeline.Output{{Index: 3, Type: "t", Data: payloadOf("out")}}}),
			want: func(rep *records.WorkReply, err error) bool {
				return err == nil && len(rep.Outputs) == 1 && string(rep.Outputs[0].Data) == string(payloadOf("out"))
			}},
		{name: "the handler's failure: an attempt", serve: replyWith(records.WorkReply{Error: &records.WorkError{Message: "declined", Retryable: true, Index: 3}}),
			want: func(rep *records.WorkReply, err error) bool {
				return err == nil && rep.Error != nil && rep.Error.Message == "declined" && rep.Error.Retryable
			}},
		{name: "running elsewhere: not attempted", serve: replyWith(records.WorkReply{Error: &records.WorkError{Busy: true, Message: "claimed"}}),
			want: func(rep *records.WorkReply, err error) bool {
				return rep == nil && errors.Is(err, errBusy) && strings.Contains(err.Error(), "claimed")
			}},
		{name: "a worker stopping: not attempted", serve: func(*nats.Msg) workAnswer { return workAnswer{code: streams.WorkCodeUnavailable, desc: "stopping"} },
			want: func(rep *records.WorkReply, err error) bool { return rep == nil && errors.Is(err, errBusy) }},
		{name: "refused: a permanent failure at the call's index", serve: func(*nats.Msg) workAnswer { return workAnswer{code: streams.WorkCodeBadRequest, desc: "bad"} },
			want: func(rep *records.WorkReply, err error) bool {
				return err == nil && rep.Error != nil && rep.Error.Permanent && rep.Error.Index == 3 && rep.Error.Message == "worker refused the request: bad"
			}},
		{name: "no worker: not attempted",
			want: func(rep *records.WorkReply, err error) bool {
				return rep == nil && errors.Is(err, errNoWorker) && notAttempted(err)
			}},
		{name: "no answer in time: not attempted", serve: func(*nats.Msg) workAnswer { return workAnswer{silent: true} }, timeout: 200 * time.Millisecond,
			want: func(rep *records.WorkReply, err error) bool { return rep == nil && errors.Is(err, errNoAnswer) }},
		{name: "too large to send: a permanent failure", serve: replyWith(records.WorkReply{}), payload: 2 << 20,
			want: func(rep *records.WorkReply, err error) bool {
				return err == nil && rep.Error != nil && rep.Error.Permanent && rep.Error.Index == 3 && strings.Contains(rep.Error.Message, "exceeds the server's max_payload")
			}},
		{name: "an answer that does not decode", serve: func(*nats.Msg) workAnswer { return workAnswer{body: []byte("junk")} },
			want: func(rep *records.WorkReply, err error) bool {
				return rep == nil && errors.Is(err, records.ErrDecode) && !notAttempted(err)
			}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subject := "work.fn.case" + strconv.Itoa(i)
			var got []*nats.Msg
			var mu sync.Mutex
			if tt.serve != nil {
				p.serve(t, subject, func(m *nats.Msg) workAnswer {
					mu.Lock()
					got = append(got, m)
					mu.Unlock()
					return tt.serve(m)
				})
			}
			timeout := cmp.Or(tt.timeout, 10*time.Second)
			w := &workClient{nc: p.nc, timeout: timeout}
			req := &records.WorkRequest{BatchID: 8, Domain: partsDomain, Calls: []records.WorkCall{{Index: 3, Type: "t", Payload: make(pipeline.Payload, tt.payload)}}}
			before := time.Now()
			rep, err := w.call(p.ctx, subject, req)
			if !tt.want(rep, err) {
				t.Fatalf("call = %+v, %v", rep, err)
			}
			mu.Lock()
			defer mu.Unlock()
			if tt.payload > 0 || tt.serve == nil {
				if len(got) != 0 {
					t.Fatalf("the worker got %d requests, want none", len(got))
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("the worker got %d requests, want 1", len(got))
			}
			sent, err := records.Decode[records.WorkRequest](got[0].Data)
			if err != nil || sent.BatchID != 8 || len(sent.Calls) != 1 || sent.Calls[0].Index != 3 {
				t.Fatalf("the worker got %+v, %v", sent, err)
			}
			d, err := strconv.ParseInt(got[0].Header.Get(streams.HeaderDeadline), 10, 64)
			if err != nil || d < before.Add(timeout).UnixNano() || d > time.Now().Add(timeout).UnixNano() {
				t.Fatalf("deadline header %q, want the work timeout from the request", got[0].Header.Get(streams.HeaderDeadline))
			}
		})
	}
}

// TestWorkClientFallback: a fallback request carries the failure, and its
// answer settles the failed function: handled with an output, or not
// handled, the fallback's own failure added to the batch's last error.
func TestWorkClientFallback(t *testing.T) {
	p := startParts(t)
	tests := []struct {
		name     string
		serve    func(*nats.Msg) workAnswer // nil: no worker serves the fallback
		want     *pipeline.Output
		bare     bool // want the failed function's index and type, no data
		wantLast string
	}{
		{name: "no fallback anywhere", wantLast: "boom"},
		{name: "the type has none", serve: replyWith(records.WorkReply{Error: &records.WorkError{NoFallback: true, Message: "none"}}), wantLast: "boom"},
		{name: "the fallback failed", serve: replyWith(records.WorkReply{Error: &records.WorkError{Message: "also broken"}}), wantLast: "boom; fallback failed: also broken"},
		{name: "handled with an output", serve: replyWith(records.WorkReply{Outputs: []pipeline.Output{{Index: 1, Type: "t", Data: payloadOf("saved")}}}),
			want: &pipeline.Output{Index: 1, Type: "t", Data: payloadOf("saved")}, wantLast: "boom"},
		{name: "handled without one", serve: replyWith(records.WorkReply{}), bare: true, wantLast: "boom"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			typ := "fb" + strconv.Itoa(i)
			reqs := make(chan records.WorkRequest, 4)
			if tt.serve != nil {
				p.serve(t, streams.FallbackSubject(typ), func(m *nats.Msg) workAnswer {
					reqs <- must(records.Decode[records.WorkRequest](m.Data))
					return tt.serve(m)
				})
			}
			b := batchOf(8)
			b.Functions = []pipeline.Function{{Type: "first"}, {Type: typ, Payload: payloadOf("in")}}
			inputs := []pipeline.Output{{Index: 0, Type: "first", Data: payloadOf("0")}}
			prog := &records.Progress{Next: 1, Failures: []int{0, 2}, Rounds: []int{0, 1}, LastError: "boom", Outputs: inputs}
			w := &workClient{nc: p.nc, timeout: 10 * time.Second}
			out, err := w.fallback(p.ctx, b, prog, failure{index: 1, exhausted: true}, 2)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			if tt.bare {
				want = &pipeline.Output{Index: 1, Type: typ}
			}
			if (out == nil) != (want == nil) || (out != nil && !equalJSON(t, out, want)) {
				t.Fatalf("fallback = %+v, want %+v", out, want)
			}
			if prog.LastError != tt.wantLast {
				t.Fatalf("last error %q, want %q", prog.LastError, tt.wantLast)
			}
			if tt.serve == nil {
				return
			}
			req := <-reqs
			f := req.Failure
			if req.BatchID != 8 || req.Attempt != 2 || req.Round != 1 || len(req.Calls) != 1 || req.Calls[0].Index != 1 || req.Calls[0].Type != typ ||
				string(req.Calls[0].Payload) != string(payloadOf("in")) || !equalJSON(t, req.Inputs, inputs) ||
				f == nil || f.BatchID != 8 || f.Index != 1 || f.Key != "k" || f.Failures != 2 || f.LastError != "boom" || !f.Exhausted {
				t.Fatalf("fallback request %+v, failure %+v", req, f)
			}
		})
	}
}
