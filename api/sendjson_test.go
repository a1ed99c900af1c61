package api

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// TestSendRequestJSONMatchesReflection: the send request's hand-written
// JSON is byte for byte what encoding/json writes by reflection, and it is
// written whenever its strings are plain.
func TestSendRequestJSONMatchesReflection(t *testing.T) {
	reqs := []SendRequest{
		{Label: "payments", Functions: Calls{{Type: "noop"}}},
		{Label: "payments"},
		{Label: "p", Functions: Calls{}},
		{},
		{Label: "l", Functions: Calls{
			{Type: "charge", Payload: pipeline.MustPayload(map[string]any{"amount": 12, "note": `<a href="x">&</a>`, "list": []any{1.5, "é", nil, true}})},
			{Type: "confirm", Expect: "ok"},
			{Type: "empty", Payload: pipeline.Payload{}},
		}, Key: "order-7", IdempotencyKey: "idem-1", RunAt: "2026-11-28T05:00:00Z", Delay: "90s"},
		{Label: "l", Functions: Calls{{Type: "t", Payload: pipeline.MustPayload("just a string")}}, Delay: "2h"},
		// Strings that need escaping: left to encoding/json.
		{Label: `a"b`, Functions: Calls{{Type: "t"}}},
		{Label: "l", Functions: Calls{{Type: "t<"}}},
		{Label: "l", Functions: Calls{{Type: "t", Expect: "line\n"}}},
		{Label: "l", Key: "é"},
		// A payload that is not msgpack: encoding/json says what is wrong.
		{Label: "l", Functions: Calls{{Type: "t", Payload: pipeline.Payload{0xc1}}}},
	}
	for _, r := range reqs {
		want, werr := json.Marshal(r)
		got, ok := r.AppendJSON([]byte("prefix"))
		switch {
		case ok && werr != nil:
			t.Errorf("%+v: wrote %s, reflection fails: %v", r, got, werr)
		case ok && string(got) != "prefix"+string(want):
			t.Errorf("%+v: wrote %s, reflection writes %s", r, got, want)
		case !ok && string(got) != "prefix":
			t.Errorf("%+v: not written, but the buffer became %q", r, got)
		case !ok && werr == nil && plainStrings(&r):
			t.Errorf("%+v: not written, though its strings are plain", r)
		}
	}
}

func plainStrings(r *SendRequest) bool {
	for _, s := range []string{r.Label, r.Key, r.IdempotencyKey, r.RunAt, r.Delay} {
		if !plainJSON(s) {
			return false
		}
	}
	for _, f := range r.Functions {
		if !plainJSON(f.Type) || !plainJSON(f.Expect) {
			return false
		}
	}
	return true
}

// TestSendManyReplyJSONMatchesReflection: reading a send_many reply gives
// what reflection reads, for the replies authz writes and for any other.
func TestSendManyReplyJSONMatchesReflection(t *testing.T) {
	replies := []SendManyReply{
		{Results: []SendManyResult{{ID: 1, Domain: "payments", Priority: pipeline.High}, {ID: 2, Domain: "payments", Priority: pipeline.High, Duplicate: true}}},
		{Results: []SendManyResult{}},
		{Results: []SendManyResult{{ID: 3, Domain: "d", Priority: pipeline.Med}, {Code: CodeUnavailable, Error: NotSubmitted + " after batch 0"}}},
		{Results: []SendManyResult{{ID: 4, Domain: "d", Priority: pipeline.Med, RunAt: time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)}}},
		{},
	}
	replies = append(replies,
		SendManyReply{Results: []SendManyResult{{ID: 5, Domain: `a"b`, Priority: pipeline.High}}},
		SendManyReply{Results: []SendManyResult{{Domain: "d", Priority: pipeline.High}}},
		SendManyReply{Results: []SendManyResult{{ID: 6, Priority: pipeline.High}}})
	for _, rep := range replies {
		data, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := rep.AppendJSON([]byte("prefix")); ok && string(got) != "prefix"+string(data) {
			t.Errorf("%+v: wrote %s, reflection writes %s", rep, got, data)
		} else if !ok && string(got) != "prefix" {
			t.Errorf("%+v: not written, but the buffer became %q", rep, got)
		} else if !ok && plainResults(rep.Results) {
			t.Errorf("%+v: not written, though every result is a plain queued batch", rep)
		}
		var got SendManyReply
		if err := json.Unmarshal(data, &got); err != nil || !reflect.DeepEqual(got, rep) && !(rep.Results == nil && got.Results == nil) {
			t.Errorf("%s: read %+v (%v), want %+v", data, got, err, rep)
		}
	}
	for _, in := range []string{
		`{"results":[{"id":1,"domain":"payments","priority":"high"}]}`,
		`{"results":[{"id":1,"domain":"payments","priority":"high"},{"id":2,"domain":"payments","priority":"high","duplicate":true}]}`,
		`{"results":[]}`,
		`{"results":null}`,
		`{"results":[{"id":1,"domain":"payments","priority":"high"},]}`,
		`{"results":[{"id":1,"domain":"payments","priority":"high"}]}x`,
		`{"results":[{"id":1,"domain":"payments","priority":"high"}]`,
		`{"results":[{"id":1,"domain":"payments","priority":"high"} ]}`,
		`{"results":[{"id":1,"domain":"payments","priority":"high"}],"results":[]}`,
		`{"results":[{"id":0,"domain":"","priority":""}]}`,
		`{"results":[{"code":503,"error":"x"}]}`,
		`{"results":[1]}`,
		`null`,
		`{}`,
	} {
		var got SendManyReply
		gerr := json.Unmarshal([]byte(in), &got)
		var want sendManyReplyJSON
		werr := json.Unmarshal([]byte(in), &want)
		if (gerr == nil) != (werr == nil) || (gerr == nil && !reflect.DeepEqual(got, SendManyReply(want))) {
			t.Errorf("%s: read %+v (%v), reflection reads %+v (%v)", in, got, gerr, want, werr)
		}
	}
}

// FuzzSendManyReplyJSON: whatever the bytes, reading a send_many reply
// without reflection gives what reflection gives.
func FuzzSendManyReplyJSON(f *testing.F) {
	f.Add([]byte(`{"results":[{"id":1,"domain":"payments","priority":"high"},{"id":2,"domain":"d","priority":"med","duplicate":true}]}`))
	f.Add([]byte(`{"results":[]}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var fast SendManyReply
		if readSendManyReply(in, &fast) {
			var want sendManyReplyJSON
			if err := json.Unmarshal(in, &want); err != nil || !reflect.DeepEqual(fast, SendManyReply(want)) {
				t.Fatalf("%q: fast path read %+v, reflection %+v (%v)", in, fast, want, err)
			}
		}
	})
}

// plainResults says whether results are all queued batches whose replies
// SendReply.AppendJSON writes.
func plainResults(results []SendManyResult) bool {
	if results == nil {
		return false
	}
	for _, r := range results {
		if r.Failed() || r.ID == 0 || r.Domain == "" || r.Priority == "" || !r.RunAt.IsZero() || !plainJSON(r.Domain) || !plainJSON(string(r.Priority)) {
			return false
		}
	}
	return true
}
