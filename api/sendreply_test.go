package api

import (
	"encoding/json"
	"testing"

	"github.com/tickflow/tickflow/pipeline"
)

// TestSendReplyJSONMatchesReflection: the send reply's hand-written JSON
// is byte for byte what encoding/json writes by reflection, and reading
// accepts and refuses what reflection does, with the same result.
func TestSendReplyJSONMatchesReflection(t *testing.T) {
	replies := []SendReply{
		{ID: 74, Domain: "payments", Priority: pipeline.High},
		{ID: 1<<64 - 1, Domain: "d", Priority: pipeline.Med, Duplicate: true},
		{},
		{ID: 5, Domain: `a"b\c<d>&é`, Priority: "x\ny"},
	}
	for _, r := range replies {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := r.AppendJSON(nil); ok && string(got) != string(want) {
			t.Errorf("%+v: wrote %s, reflection writes %s", r, got, want)
		} else if !ok && plainJSON(r.Domain) && plainJSON(string(r.Priority)) {
			t.Errorf("%+v: not written, though its strings are plain", r)
		}
		var back SendReply
		if err := json.Unmarshal(want, &back); err != nil || back != r {
			t.Errorf("%s: read %+v (%v), want %+v", want, back, err, r)
		}
	}
	for _, in := range []string{
		`{"id":74,"domain":"payments","priority":"high"}`,
		`{"id":74,"domain":"payments","priority":"high","duplicate":true}`,
		`{"id":74,"domain":"payments","priority":"high","duplicate":false}`,
		`{ "id": 74, "domain": "payments", "priority": "high" }`,
		`{"priority":"high","id":74,"domain":"payments"}`,
		`{"id":74,"domain":"pay\u006dents","priority":"high","extra":[1,2]}`,
		`{"id":074,"domain":"payments","priority":"high"}`,
		`{"id":-1,"domain":"payments","priority":"high"}`,
		`{"id":18446744073709551616,"domain":"payments","priority":"high"}`,
		`{"id":74,"domain":"payments","priority":"high"}x`,
		`{"id":74,"domain":"payments","priority":"high"`,
		`{"id":74,"domain":null,"priority":"high"}`,
		`null`,
		`{}`,
	} {
		var got SendReply
		gerr := json.Unmarshal([]byte(in), &got)
		var want sendReplyJSON
		werr := json.Unmarshal([]byte(in), &want)
		if (gerr == nil) != (werr == nil) || (gerr == nil && got != SendReply(want)) {
			t.Errorf("%s: read %+v (%v), reflection reads %+v (%v)", in, got, gerr, want, werr)
		}
	}
}

// FuzzSendReplyJSON: whatever the bytes, reading a send reply gives what
// reflection gives.
func FuzzSendReplyJSON(f *testing.F) {
	f.Add([]byte(`{"id":74,"domain":"payments","priority":"high","duplicate":true}`))
	f.Add([]byte(`{"id":0,"domain":"","priority":""}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var fast SendReply
		if readSendReply(in, &fast) {
			var want sendReplyJSON
			if err := json.Unmarshal(in, &want); err != nil || fast != SendReply(want) {
				t.Fatalf("%q: fast path read %+v, reflection %+v (%v)", in, fast, want, err)
			}
		}
	})
}
