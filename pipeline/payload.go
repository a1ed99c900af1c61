package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/tickflow/tickflow/logging"
	"github.com/vmihailenco/msgpack/v5"
)

// Payload is a function's argument (or a handler's result) as raw msgpack.
// On the wire it is embedded as is; in JSON it reads and writes as the
// equivalent JSON value, so people can type it with `nats req`.
type Payload []byte

// EncodePayload msgpack-encodes v into a Payload. A struct field is named
// by its msgpack tag, else by its json tag, else by its Go name, as Decode
// reads it, so a result struct tagged for JSON reads back in JSON (`nats
// req`, the dashboard, the client) under its JSON names.
func EncodePayload(v any) (Payload, error) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("pipeline: encode payload: %w", err)
	}
	return buf.Bytes(), nil
}

// MustPayload is EncodePayload for values known to encode, such as literals in tests and examples.
func MustPayload(v any) Payload {
	p, err := EncodePayload(v)
	if err != nil {
		panic(err)
	}
	return p
}

// Decode msgpack-decodes the payload into v. An empty payload leaves v as is.
//
// A struct field is matched by its msgpack tag, else by its json tag, else
// by its Go name (exactly, case included), so a payload struct tagged
// `json:"amount"` decodes the same as one tagged `msgpack:"amount"`. A key
// of the payload that matches no field of a struct is an error, not
// silence, and so is a value of the wrong type: the error names the key and
// the Go type, wraps ErrPayload and is Permanent, since no retry changes a
// payload. A handler returns it as it is, or wrapped with %w.
func (p Payload) Decode(v any) (err error) {
	if len(p) == 0 {
		return nil
	}
	// msgpack v5.4.1 panics on a nil where a time.Time is expected; any
	// payload is caller input, so a panic is a decode error like another.
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Errorf("%w into %T: %v", ErrPayload, v, r))
		}
	}()
	if err := p.decodeInto(v); err != nil {
		return Permanent(fmt.Errorf("%w into %T: %s", ErrPayload, v, describe(p, v, err)))
	}
	return nil
}

func (p Payload) decodeInto(v any) error {
	dec := msgpack.NewDecoder(bytes.NewReader(p))
	dec.SetCustomStructTag("json")
	dec.DisallowUnknownFields(true)
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.PeekCode(); err != io.EOF {
		return errors.New("trailing data after the value")
	}
	return nil
}

// describe says which key of the payload failed to decode into which field
// of the struct v points to, where it can tell; otherwise msgpack's own
// message. It looks one level deep, where a handler's mistakes are.
func describe(p Payload, v any, err error) string {
	msg := logging.Capped(err.Error())
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return msg
	}
	var m map[string]msgpack.RawMessage
	if msgpack.Unmarshal(p, &m) != nil {
		return msg + " (the payload is not a map, and " + t.Elem().String() + " is a struct)"
	}
	fields, ok := fieldNames(t.Elem())
	if !ok {
		return msg
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f, ok := fields[k]
		if !ok {
			return fmt.Sprintf("payload key %q matches no field of %s (fields: %s); "+
				"a field is named by its msgpack tag, else its json tag, else its Go name",
				logging.Capped(k), t.Elem(), strings.Join(sortedKeys(fields), ", "))
		}
		if e := Payload(m[k]).decodeInto(reflect.New(f.Type).Interface()); e != nil {
			return fmt.Sprintf("payload key %q into field %s %s: %s", logging.Capped(k), f.Name, f.Type, logging.Capped(e.Error()))
		}
	}
	return msg
}

// fieldNames maps the names msgpack reads a struct's exported fields under
// (its tag, else the json tag, else the Go name) to the fields. It does not
// follow embedded structs, whose fields msgpack may inline: ok is false for
// a struct that has one, and describe then gives msgpack's own message.
func fieldNames(t reflect.Type) (_ map[string]reflect.StructField, ok bool) {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous {
			return nil, false
		}
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("msgpack")
		if tag == "" {
			tag = f.Tag.Get("json")
		}
		name, _, _ := strings.Cut(tag, ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out[name] = f
	}
	return out, true
}

func sortedKeys(m map[string]reflect.StructField) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// EncodeMsgpack embeds the raw msgpack.
func (p Payload) EncodeMsgpack(enc *msgpack.Encoder) error {
	if len(p) == 0 {
		return enc.EncodeNil()
	}
	_, err := enc.Writer().Write(p)
	return err
}

// DecodeMsgpack keeps the raw msgpack of the value.
func (p *Payload) DecodeMsgpack(dec *msgpack.Decoder) error {
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	if len(raw) == 1 && raw[0] == 0xc0 { // nil
		*p = nil
		return nil
	}
	*p = Payload(raw)
	return nil
}

// MarshalJSON writes the payload as the JSON value it encodes.
func (p Payload) MarshalJSON() ([]byte, error) {
	if len(p) == 0 {
		return []byte("null"), nil
	}
	dec := msgpack.NewDecoder(bytes.NewReader(p))
	dec.SetMapDecoder(func(d *msgpack.Decoder) (any, error) { return d.DecodeUntypedMap() })
	v, err := dec.DecodeInterface()
	if err != nil {
		return nil, fmt.Errorf("pipeline: payload is not valid msgpack: %w", err)
	}
	return json.Marshal(jsonable(v))
}

// UnmarshalJSON reads any JSON value and keeps it as msgpack, with the keys
// of every object in sorted order so the same value always has the same
// bytes.
//
// Every value must come back from MarshalJSON as the same value, so
// numbers are kept exactly or refused: an integer as an int64, or as a
// uint64 above the int64 range; any other number as a float64 when that
// float64 reads back as the number written (0.1, 1.5e300). A number that
// does neither (1e999, 12345678901234567890123, 3.14159265358979323846) is
// refused, and so is an object that repeats a key. The error is a
// *ValidationError whose Field is the path inside the payload, such as
// "payload.items[2].amount"; send such numbers as strings.
func (p *Payload) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*p = nil
		return nil
	}
	r := jsonReader{dec: json.NewDecoder(bytes.NewReader(b)), path: []string{"payload"}}
	r.dec.UseNumber()
	v, err := r.value()
	if err != nil {
		return err
	}
	if _, err := r.dec.Token(); err != io.EOF {
		return fmt.Errorf("pipeline: payload: trailing data after the JSON value")
	}
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	enc.UseCompactInts(true)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("pipeline: payload: %w", err)
	}
	*p = buf.Bytes()
	return nil
}

// maxJSONDepth bounds the nesting of a payload, as encoding/json bounds
// what it decodes.
const maxJSONDepth = 10000

// jsonReader reads one JSON value token by token, so that it sees every
// number as written and every key of an object, and knows where it is.
type jsonReader struct {
	dec  *json.Decoder
	path []string // the path of the value being read, one element per level
}

func (r *jsonReader) fail(format string, args ...any) error {
	return invalid(logging.Cap(strings.Join(r.path, ""), 4*logging.CapBytes), format, args...)
}

func (r *jsonReader) value() (any, error) {
	if len(r.path) > maxJSONDepth {
		return nil, r.fail("nests deeper than %d levels", maxJSONDepth)
	}
	tok, err := r.dec.Token()
	if err != nil {
		return nil, fmt.Errorf("pipeline: payload: %w", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			return r.object()
		case '[':
			return r.array()
		}
		return nil, fmt.Errorf("pipeline: payload: unexpected %q", t)
	case json.Number:
		return r.number(string(t))
	default: // string, bool or nil
		return t, nil
	}
}

func (r *jsonReader) object() (any, error) {
	m := map[string]any{}
	for r.dec.More() {
		tok, err := r.dec.Token()
		if err != nil {
			return nil, fmt.Errorf("pipeline: payload: %w", err)
		}
		k, _ := tok.(string)
		r.path = append(r.path, "."+logging.Capped(k))
		if _, dup := m[k]; dup {
			return nil, r.fail("a key repeated in one object; an object's keys must be unique")
		}
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		r.path = r.path[:len(r.path)-1]
		m[k] = v
	}
	if _, err := r.dec.Token(); err != nil { // '}'
		return nil, fmt.Errorf("pipeline: payload: %w", err)
	}
	return m, nil
}

func (r *jsonReader) array() (any, error) {
	a := []any{}
	for r.dec.More() {
		r.path = append(r.path, "["+strconv.Itoa(len(a))+"]")
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		r.path = r.path[:len(r.path)-1]
		a = append(a, v)
	}
	if _, err := r.dec.Token(); err != nil { // ']'
		return nil, fmt.Errorf("pipeline: payload: %w", err)
	}
	return a, nil
}

// number keeps s as an int64, a uint64 or a float64, whichever holds it
// exactly (see UnmarshalJSON), or says why none does.
func (r *jsonReader) number(s string) (any, error) {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		return u, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, r.fail("number %s is out of range: numbers must be finite and within ±1.8e308", logging.Capped(s))
	}
	if back := strconv.FormatFloat(f, 'g', -1, 64); !sameDecimal(s, back) {
		return nil, r.fail("number %s would come back as %s: integers must lie in [-2^63, 2^64-1] and other numbers "+
			"must be held exactly by a float64 (about 17 significant digits); send it as a string to keep it exact", logging.Capped(s), back)
	}
	return f, nil
}

// sameDecimal reports whether two JSON number literals denote the same
// decimal number (1e2 and 100.0 do; -0 and 0 do).
func sameDecimal(a, b string) bool {
	an, ad, ae, aok := decimal(a)
	bn, bd, be, bok := decimal(b)
	return aok && bok && ad == bd && (ad == "" || an == bn && ae == be)
}

// decimal splits a JSON number literal into its sign, its significant
// digits without leading or trailing zeros, and the power of ten that puts
// the point in front of those digits: 0.d₁d₂…dₙ × 10^exp. Zero has no
// digits. ok is false for an exponent too large to count.
func decimal(s string) (neg bool, digits string, exp int, ok bool) {
	neg = strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > math.MaxInt32 || e < math.MinInt32 {
			return false, "", 0, false
		}
		exp, s = e, s[:i]
	}
	whole, frac, _ := strings.Cut(s, ".")
	digits = whole + frac
	exp += len(whole)
	trimmed := strings.TrimLeft(digits, "0")
	exp -= len(digits) - len(trimmed)
	return neg, strings.TrimRight(trimmed, "0"), exp, true
}

// jsonable turns msgpack's map[any]any into map[string]any for encoding/json.
func jsonable(v any) any {
	switch t := v.(type) {
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case map[string]any:
		for k, e := range t {
			t[k] = jsonable(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = jsonable(e)
		}
		return t
	case []byte:
		return string(t)
	case float64:
		return finite(t)
	case float32:
		if f := float64(t); math.IsNaN(f) || math.IsInf(f, 0) {
			return finite(f)
		}
		return t
	default:
		return v
	}
}

// finite returns f, or for a float JSON cannot hold (written by Go code,
// never read from JSON) its name as a string, so one such value does not
// make a whole record unreadable.
func finite(f float64) any {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	}
	return f
}
