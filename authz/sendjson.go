package authz

import (
	"unicode/utf8"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/pipeline"
)

// decodeSend reads a send request as decodeJSON does, with a fast path for
// the shape clients send: one object of the known fields, strings without
// escapes, functions as objects of type, payload and expect. Anything else
// (an escape, a null, an unknown or differently cased field, a malformed
// body) is read again by decodeJSON, which decides and words the error, so
// both paths accept the same bodies and read them the same way. The send
// path is the hottest request authz serves, and encoding/json's reflection
// and a decoder per function cost it about half of the decoding.
func decodeSend(body []byte, req *api.SendRequest) error {
	return decodeFast(body, req, fastSend)
}

// decodeFast reads body into v with fast, and when fast does not read it,
// from scratch with decodeJSON.
func decodeFast[T any](body []byte, v *T, fast func([]byte, *T) bool) error {
	if fast(body, v) {
		return nil
	}
	var zero T
	*v = zero
	return decodeJSON(body, v)
}

// fastSend decodes body into req when it is in the fast path's shape, and
// says whether it was.
func fastSend(b []byte, req *api.SendRequest) bool {
	p := sendParser{b: b}
	if !p.send(req) {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

// decodeSendMany reads a send_many request as decodeJSON does, with
// decodeSend's fast path for each batch; a body any part of which the fast
// path does not read is read again, whole, by decodeJSON.
func decodeSendMany(body []byte, req *api.SendManyRequest) error {
	return decodeFast(body, req, fastSendMany)
}

// fastSendMany decodes body into req when it is an object of one batches
// array whose every element is in the fast path's shape, and says whether
// it was. A second batches member is left to the slow path.
func fastSendMany(b []byte, req *api.SendManyRequest) bool {
	p := sendParser{b: b}
	seen := false
	if !p.object(func(name []byte) bool {
		if string(name) != "batches" || seen {
			return false
		}
		seen = true
		return p.sends(&req.Batches)
	}) {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

// sends reads an array of send requests; a null is left to the slow path,
// and so are more than api.MaxSendMany (sendMany refuses them).
func (p *sendParser) sends(dst *[]api.SendRequest) bool {
	out := make([]api.SendRequest, 0) // [] reads as empty, not nil, as encoding/json reads it
	if !p.array(func() bool {
		if len(out) == api.MaxSendMany {
			return false
		}
		out = append(out, api.SendRequest{})
		return p.send(&out[len(out)-1])
	}) {
		return false
	}
	*dst = out
	return true
}

// send reads one send request's object into req.
func (p *sendParser) send(req *api.SendRequest) bool {
	return p.object(func(name []byte) bool {
		switch string(name) {
		case "label":
			return p.str(&req.Label)
		case "key":
			return p.str(&req.Key)
		case "idempotency_key":
			return p.str(&req.IdempotencyKey)
		case "run_at":
			return p.str(&req.RunAt)
		case "delay":
			return p.str(&req.Delay)
		case "functions":
			return p.calls(&req.Functions)
		}
		return false
	})
}

// sendParser reads JSON from b at i, refusing (false) whatever it does not
// read exactly as encoding/json would.
type sendParser struct {
	b []byte
	i int
}

func (p *sendParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// take consumes c after optional space.
func (p *sendParser) take(c byte) bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

// raw reads a string without escapes or control characters, in valid
// UTF-8, and returns its bytes.
func (p *sendParser) raw() ([]byte, bool) {
	if !p.take('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			s := p.b[start:p.i]
			p.i++
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

func (p *sendParser) str(dst *string) bool {
	s, ok := p.raw()
	if ok {
		*dst = string(s)
	}
	return ok
}

// object reads an object, calling field for each member with the parser
// at its value.
func (p *sendParser) object(field func(name []byte) bool) bool {
	if !p.take('{') {
		return false
	}
	if p.take('}') {
		return true
	}
	for {
		name, ok := p.raw()
		if !ok || !p.take(':') || !field(name) {
			return false
		}
		if p.take('}') {
			return true
		}
		if !p.take(',') {
			return false
		}
	}
}

func (p *sendParser) calls(dst *api.Calls) bool {
	out := make(api.Calls, 0, 1)
	if !p.array(func() bool {
		var c api.CallSpec
		if !p.call(&c) {
			return false
		}
		out = append(out, c)
		return true
	}) {
		return false
	}
	*dst = out
	return true
}

// array reads an array, calling elem for each element with the parser at
// its value.
func (p *sendParser) array(elem func() bool) bool {
	if !p.take('[') {
		return false
	}
	if p.take(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if p.take(']') {
			return true
		}
		if !p.take(',') {
			return false
		}
	}
}

func (p *sendParser) call(c *api.CallSpec) bool {
	return p.object(func(name []byte) bool {
		switch string(name) {
		case "type":
			return p.str(&c.Type)
		case "expect":
			return p.str(&c.Expect)
		case "payload":
			return p.payload(&c.Payload)
		}
		return false
	})
}

// payload hands the value's bytes to pipeline.Payload, which reads them as
// it does under encoding/json; a null is left to the slow path.
func (p *sendParser) payload(dst *pipeline.Payload) bool {
	p.space()
	start := p.i
	if !p.skip(0) || p.b[start] == 'n' {
		return false
	}
	var v pipeline.Payload
	if v.UnmarshalJSON(p.b[start:p.i]) != nil {
		return false
	}
	*dst = v
	return true
}

// maxSkipDepth bounds the nesting skip follows; deeper payloads take the
// slow path.
const maxSkipDepth = 64

// skip moves past one JSON value: it finds the value's end in a well-formed
// body; what is inside is checked by whoever reads it.
func (p *sendParser) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	p.space()
	if p.i >= len(p.b) {
		return false
	}
	switch p.b[p.i] {
	case '"':
		p.i++
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case '\\':
				p.i += 2
				continue
			case '"':
				p.i++
				return true
			}
			p.i++
		}
		return false
	case '{', '[':
		closer := byte('}')
		if p.b[p.i] == '[' {
			closer = ']'
		}
		p.i++
		if p.take(closer) {
			return true
		}
		for {
			if closer == '}' {
				if _, ok := p.raw(); !ok || !p.take(':') {
					return false
				}
			}
			if !p.skip(depth + 1) {
				return false
			}
			if p.take(closer) {
				return true
			}
			if !p.take(',') {
				return false
			}
		}
	default:
		start := p.i
		for p.i < len(p.b) {
			switch p.b[p.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return p.i > start
			}
			p.i++
		}
		return p.i > start
	}
}
