package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Payload is a function's argument (or a handler's result) as raw msgpack.
// On the wire it is embedded as is; in JSON it reads and writes as the
// equivalent JSON value, so people can type it with `nats req`.
type Payload []byte

// EncodePayload msgpack-encodes v into a Payload.
func EncodePayload(v any) (Payload, error) {
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("pipeline: encode payload: %w", err)
	}
	return b, nil
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
func (p Payload) Decode(v any) (err error) {
	if len(p) == 0 {
		return nil
	}
	// msgpack v5.4.1 panics on a nil where a time.Time is expected; any
	// payload is caller input, so a panic is a decode error like another.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pipeline: decode payload into %T: %v", v, r)
		}
	}()
	if err := msgpack.Unmarshal(p, v); err != nil {
		return fmt.Errorf("pipeline: decode payload into %T: %w", v, err)
	}
	return nil
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

// UnmarshalJSON reads any JSON value and keeps it as msgpack.
func (p *Payload) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*p = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("pipeline: payload: %w", err)
	}
	enc, err := msgpack.Marshal(fromJSON(v))
	if err != nil {
		return fmt.Errorf("pipeline: payload: %w", err)
	}
	*p = enc
	return nil
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
	default:
		return v
	}
}

// fromJSON turns json.Number into int64 or float64 so msgpack stores numbers natively.
func fromJSON(v any) any {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	case map[string]any:
		for k, e := range t {
			t[k] = fromJSON(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = fromJSON(e)
		}
		return t
	default:
		return v
	}
}
