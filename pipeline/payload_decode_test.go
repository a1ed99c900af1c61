package pipeline_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/pipeline"
)

// fromJSON is a payload as a sender types it (`nats req`, the client).
func fromJSON(t *testing.T, s string) pipeline.Payload {
	t.Helper()
	var p pipeline.Payload
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		t.Fatalf("payload %s: %v", s, err)
	}
	return p
}

type jsonTagged struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents,omitempty"`
	Note     string `json:"-"`
}

type msgpackTagged struct {
	Customer string `msgpack:"customer"`
	Cents    int64  `msgpack:"cents"`
}

type bothTagged struct {
	// The msgpack tag wins where both are given.
	Customer string `msgpack:"customer" json:"client"`
}

type untagged struct {
	Customer string
}

func TestPayloadDecodeTags(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		into    func() any
		want    any
	}{
		{name: "json tags", payload: `{"customer": "alice", "cents": 1250}`,
			into: func() any { return &jsonTagged{} }, want: &jsonTagged{Customer: "alice", Cents: 1250}},
		{name: "msgpack tags", payload: `{"customer": "alice", "cents": 1250}`,
			into: func() any { return &msgpackTagged{} }, want: &msgpackTagged{Customer: "alice", Cents: 1250}},
		{name: "msgpack tag wins over json tag", payload: `{"customer": "alice"}`,
			into: func() any { return &bothTagged{} }, want: &bothTagged{Customer: "alice"}},
		{name: "no tags: the Go name", payload: `{"Customer": "alice"}`,
			into: func() any { return &untagged{} }, want: &untagged{Customer: "alice"}},
		{name: "fewer keys than fields", payload: `{"customer": "alice"}`,
			into: func() any { return &jsonTagged{} }, want: &jsonTagged{Customer: "alice"}},
		{name: "a map takes any key", payload: `{"x": 1, "y": 2}`,
			into: func() any { return &map[string]int{} }, want: &map[string]int{"x": 1, "y": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.into()
			if err := fromJSON(t, tt.payload).Decode(got); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			gb, _ := json.Marshal(got)
			wb, _ := json.Marshal(tt.want)
			if string(gb) != string(wb) {
				t.Fatalf("decoded %s, want %s", gb, wb)
			}
		})
	}
}

func TestPayloadDecodeMismatch(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		into    any
		// want are the pieces the error must say.
		want []string
	}{
		{name: "a key no field is named for", payload: `{"customer": "alice", "amount": 5}`, into: &jsonTagged{},
			want: []string{`payload key "amount" matches no field`, "jsonTagged", "fields: cents, customer"}},
		{name: "Go names are exact", payload: `{"customer": "alice"}`, into: &untagged{},
			want: []string{`payload key "customer" matches no field`, "fields: Customer"}},
		{name: "an ignored field is no field", payload: `{"Note": "x"}`, into: &jsonTagged{},
			want: []string{`payload key "Note" matches no field`}},
		{name: "the msgpack tag hides the json one", payload: `{"client": "alice"}`, into: &bothTagged{},
			want: []string{`payload key "client" matches no field`, "fields: customer"}},
		{name: "a value of the wrong type", payload: `{"customer": "alice", "cents": "12.50"}`, into: &msgpackTagged{},
			want: []string{`payload key "cents" into field Cents int64`}},
		{name: "not a map for a struct", payload: `[1, 2]`, into: &jsonTagged{},
			want: []string{"the payload is not a map", "jsonTagged is a struct"}},
		{name: "a string for an int", payload: `"ten"`, into: new(int),
			want: []string{"into *int"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := fromJSON(t, tt.payload).Decode(tt.into)
			if err == nil {
				t.Fatalf("Decode of %s into %T: no error", tt.payload, tt.into)
			}
			if !errors.Is(err, pipeline.ErrPayload) || !pipeline.IsPermanent(err) {
				t.Fatalf("error %v: want ErrPayload and permanent", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// A result struct tagged for JSON reads back in JSON under its JSON names.
func TestEncodePayloadJSONTags(t *testing.T) {
	p := pipeline.MustPayload(jsonTagged{Customer: "alice", Note: "internal"})
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"customer":"alice"}` {
		t.Fatalf("JSON %s, want {\"customer\":\"alice\"}", b)
	}
	var back jsonTagged
	if err := p.Decode(&back); err != nil || back.Customer != "alice" {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

type embedding struct {
	msgpackTagged
	Extra string `json:"extra"`
}

// An embedded struct's fields are inlined: they decode, and a key none of
// them names is still refused, in msgpack's words.
func TestPayloadDecodeEmbedded(t *testing.T) {
	var got embedding
	if err := fromJSON(t, `{"customer":"alice","cents":5,"extra":"x"}`).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.Customer != "alice" || got.Cents != 5 || got.Extra != "x" {
		t.Fatalf("decoded %+v", got)
	}
	err := fromJSON(t, `{"customer":"alice","other":1}`).Decode(&got)
	if !errors.Is(err, pipeline.ErrPayload) || !strings.Contains(err.Error(), `unknown field "other"`) {
		t.Fatalf("error %v, want ErrPayload about the unknown field other", err)
	}
}
