package pipeline_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// jsonValue decodes JSON keeping numbers exact, for semantic comparison.
func jsonValue(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("invalid JSON %s: %v", b, err)
	}
	return normalizeNumbers(v)
}

// normalizeNumbers makes 1e2 and 100 compare equal while keeping 2^53+1
// distinct from 2^53.
func normalizeNumbers(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if u, err := strconv.ParseUint(string(t), 10, 64); err == nil {
			return u
		}
		f, _ := t.Float64()
		if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f)
		}
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = normalizeNumbers(e)
		}
	case []any:
		for i, e := range t {
			t[i] = normalizeNumbers(e)
		}
	}
	return v
}

func TestPayloadJSONRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		json string
		// msgpack, when set, is the exact encoding the JSON must become.
		msgpack []byte
	}{
		{name: "null", json: `null`},
		{name: "null with spaces", json: " \n null \t"},
		{name: "empty object", json: `{}`, msgpack: []byte{0x80}},
		{name: "object", json: `{"amount": 10, "currency": "EUR", "ok": true}`},
		{name: "nested object", json: `{"a": {"b": {"c": [1, {"d": null}]}}}`},
		{name: "empty array", json: `[]`, msgpack: []byte{0x90}},
		{name: "array of mixed values", json: `[1, "two", 3.5, false, null, {"x": []}]`},
		{name: "small integer", json: `42`},
		{name: "zero", json: `0`},
		{name: "negative integer", json: `-7`},
		{name: "2^53 + 1 stays exact", json: `9007199254740993`},
		{name: "largest int64", json: `9223372036854775807`},
		{name: "smallest int64", json: `-9223372036854775808`},
		{name: "above int64 stays exact", json: `12345678901234567890`, msgpack: []byte{0xcf, 0xab, 0x54, 0xa9, 0x8c, 0xeb, 0x1f, 0x0a, 0xd2}},
		{name: "largest uint64", json: `18446744073709551615`},
		{name: "decimal a float64 reads back", json: `0.1`},
		{name: "negative zero", json: `-0.0`},
		{name: "keys in any order give the same bytes", json: `{"b": 1, "a": 2}`, msgpack: []byte{0x82, 0xa1, 'a', 0x02, 0xa1, 'b', 0x01}},
		{name: "fraction", json: `1.5`},
		{name: "negative fraction", json: `-0.25`},
		{name: "exponent", json: `1e300`},
		{name: "integral float written as integer", json: `1e2`},
		{name: "string", json: `"hello"`, msgpack: []byte{0xa5, 'h', 'e', 'l', 'l', 'o'}},
		{name: "empty string", json: `""`},
		{name: "unicode and escapes", json: `"grüße \"quoted\" \\ \n \u0000 ☃"`},
		{name: "boolean", json: `true`, msgpack: []byte{0xc3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p pipeline.Payload
			if err := json.Unmarshal([]byte(tt.json), &p); err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.json, err)
			}
			if strings.TrimSpace(tt.json) == "null" {
				if p != nil {
					t.Fatalf("null became %x, want a nil payload", []byte(p))
				}
			} else if len(p) == 0 {
				t.Fatalf("%s became an empty payload", tt.json)
			}
			if tt.msgpack != nil && !bytes.Equal(p, tt.msgpack) {
				t.Errorf("msgpack = %x, want %x", []byte(p), tt.msgpack)
			}
			out, err := json.Marshal(p)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if got, want := jsonValue(t, out), jsonValue(t, []byte(tt.json)); !reflect.DeepEqual(got, want) {
				t.Fatalf("JSON round trip: %s → %x → %s", tt.json, []byte(p), out)
			}
			// The msgpack must be plain msgpack: it decodes to the same value.
			if len(p) > 0 {
				var v any
				if err := msgpack.Unmarshal(p, &v); err != nil {
					t.Fatalf("payload %x is not msgpack: %v", []byte(p), err)
				}
			}
		})
	}
}

func TestPayloadFromMsgpackToJSON(t *testing.T) {
	tests := []struct {
		name  string
		value any
		json  string
	}{
		{name: "struct", value: struct {
			Amount int    `msgpack:"amount"`
			Note   string `msgpack:"note"`
		}{10, "rent"}, json: `{"amount":10,"note":"rent"}`},
		{name: "map with integer keys", value: map[int]string{1: "a", 2: "b"}, json: `{"1":"a","2":"b"}`},
		{name: "bytes read as a string", value: []byte("raw"), json: `"raw"`},
		{name: "nested slices", value: [][]int{{1, 2}, {}}, json: `[[1,2],[]]`},
		{name: "nil", value: nil, json: `null`},
		{name: "float32", value: float32(0.5), json: `0.5`},
		{name: "uint64", value: uint64(18446744073709551615), json: `18446744073709551615`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pipeline.MustPayload(tt.value)
			out, err := json.Marshal(p)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			if got, want := jsonValue(t, out), jsonValue(t, []byte(tt.json)); !reflect.DeepEqual(got, want) {
				t.Fatalf("Marshal(%#v) = %s, want %s", tt.value, out, tt.json)
			}
		})
	}
}

func TestPayloadMarshalJSONRejectsGarbage(t *testing.T) {
	for _, p := range []pipeline.Payload{{0xc1}, {0x92, 0x01}, {0xdb, 0xff}} {
		if out, err := json.Marshal(p); err == nil {
			t.Errorf("Marshal(%x) = %s, want an error", []byte(p), out)
		}
	}
	var p pipeline.Payload
	if err := json.Unmarshal([]byte(`{"a":`), &p); err == nil {
		t.Error("Unmarshal of truncated JSON succeeded")
	}
}

// TestPayloadEmbedsInMsgpack checks that a Payload travels as the raw
// value inside a record and does not disturb the fields around it.
func TestPayloadEmbedsInMsgpack(t *testing.T) {
	type record struct {
		Before  string           `msgpack:"before"`
		Payload pipeline.Payload `msgpack:"payload"`
		After   []int            `msgpack:"after"`
	}
	tests := []struct {
		name    string
		payload pipeline.Payload
	}{
		{name: "object", payload: pipeline.MustPayload(map[string]any{"k": []any{1, "x", nil}})},
		{name: "scalar", payload: pipeline.MustPayload(3.25)},
		{name: "nil", payload: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := record{Before: "b", Payload: tt.payload, After: []int{1, 2}}
			b, err := msgpack.Marshal(&in)
			if err != nil {
				t.Fatal(err)
			}
			var out record
			if err := msgpack.Unmarshal(b, &out); err != nil {
				t.Fatalf("Unmarshal(%x): %v", b, err)
			}
			if !bytes.Equal(out.Payload, in.Payload) || (in.Payload == nil) != (out.Payload == nil) {
				t.Errorf("payload %x came back as %x", []byte(in.Payload), []byte(out.Payload))
			}
			if out.Before != in.Before || !reflect.DeepEqual(out.After, in.After) {
				t.Errorf("surrounding fields changed: %+v → %+v", in, out)
			}
		})
	}
}

func TestPayloadDecode(t *testing.T) {
	type transfer struct {
		Amount int64    `msgpack:"amount"`
		To     string   `msgpack:"to"`
		Tags   []string `msgpack:"tags"`
	}
	var fn pipeline.Function
	if err := json.Unmarshal([]byte(`{"type":"transfer","payload":{"amount":10,"to":"bob","tags":["a","b"]}}`), &fn); err != nil {
		t.Fatal(err)
	}
	var got transfer
	if err := fn.Payload.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if want := (transfer{Amount: 10, To: "bob", Tags: []string{"a", "b"}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode = %+v, want %+v", got, want)
	}

	keep := transfer{Amount: 5}
	if err := pipeline.Payload(nil).Decode(&keep); err != nil || keep.Amount != 5 {
		t.Fatalf("empty payload Decode = %+v, %v; want the value left as is", keep, err)
	}
	var n int
	if err := pipeline.MustPayload("text").Decode(&n); err == nil || !strings.Contains(err.Error(), "*int") {
		t.Fatalf("Decode of a string into *int = %v, want an error naming the target type", err)
	}
}

func TestEncodePayloadRejectsUnencodable(t *testing.T) {
	if _, err := pipeline.EncodePayload(make(chan int)); err == nil {
		t.Fatal("EncodePayload(chan) succeeded")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustPayload(chan) did not panic")
		}
	}()
	pipeline.MustPayload(make(chan int))
}

// TestPayloadRefusesWhatWouldComeBackChanged: a payload is kept only if
// MarshalJSON gives back the same value; the error names the field.
func TestPayloadRefusesWhatWouldComeBackChanged(t *testing.T) {
	tests := []struct {
		name, json, field string
	}{
		{name: "infinite", json: `1e999`, field: "payload"},
		{name: "negative infinite in an object", json: `{"amount": -1e999}`, field: "payload.amount"},
		{name: "integer above uint64", json: `{"n": 12345678901234567890123}`, field: "payload.n"},
		{name: "integer below int64", json: `[1, -9223372036854775809]`, field: "payload[1]"},
		{name: "more digits than a float64 holds", json: `{"pi": [3.14159265358979323846]}`, field: "payload.pi[0]"},
		{name: "underflow to zero", json: `1e-400`, field: "payload"},
		{name: "repeated key", json: `{"a": {"to": "bob", "to": "eve"}}`, field: "payload.a.to"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p pipeline.Payload
			err := json.Unmarshal([]byte(tt.json), &p)
			var ve *pipeline.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field || !errors.Is(err, pipeline.ErrInvalid) {
				t.Fatalf("Unmarshal(%s) = %v, want a ValidationError on %s", tt.json, err, tt.field)
			}
		})
	}
}

// TestPayloadErrorsAreCapped: a huge number or key is shown capped.
func TestPayloadErrorsAreCapped(t *testing.T) {
	var p pipeline.Payload
	long := "1" + strings.Repeat("0", 5000) + ".5"
	err := json.Unmarshal([]byte(`{"x":`+long+`}`), &p)
	if err == nil || len(err.Error()) > 600 || !strings.Contains(err.Error(), "(5003 bytes)") {
		t.Fatalf("error not capped: %.200v… (%d bytes)", err, len(err.Error()))
	}
	key := strings.Repeat("k", 5000)
	err = json.Unmarshal([]byte(`{"`+key+`":1,"`+key+`":2}`), &p)
	if err == nil || len(err.Error()) > 600 {
		t.Fatalf("error not capped: %.200v…", err)
	}
}

// TestPayloadNonFiniteFromGoStaysReadable: Go code can encode a NaN or an
// infinity, which JSON cannot hold; the record stays readable.
func TestPayloadNonFiniteFromGoStaysReadable(t *testing.T) {
	p := pipeline.MustPayload(map[string]any{"nan": math.NaN(), "inf": math.Inf(1), "ninf": float32(math.Inf(-1)), "f32": float32(0.1)})
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"f32":0.1,"inf":"+Inf","nan":"NaN","ninf":"-Inf"}`; string(out) != want {
		t.Fatalf("Marshal = %s, want %s", out, want)
	}
}
