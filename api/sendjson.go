package api

import (
	"bytes"
	"encoding/json"
)

// AppendJSON appends the request as encoding/json writes it, without
// reflection: the Go client writes the hottest request with it. ok is false
// (and b unchanged) when one of its strings needs escaping or a payload
// does not encode; encoding/json then writes it, or says what is wrong.
func (r *SendRequest) AppendJSON(b []byte) (out []byte, ok bool) {
	if !plainJSON(r.Label) || !plainJSON(r.Key) || !plainJSON(r.IdempotencyKey) || !plainJSON(r.RunAt) || !plainJSON(r.Delay) {
		return b, false
	}
	start := len(b)
	b = append(b, `{"label":"`...)
	b = append(b, r.Label...)
	b = append(b, `","functions":`...)
	if r.Functions == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Functions {
			f := &r.Functions[i]
			if !plainJSON(f.Type) || !plainJSON(f.Expect) {
				return b[:start], false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"`...)
			b = append(b, f.Type...)
			b = append(b, '"')
			if len(f.Payload) > 0 {
				p, err := f.Payload.MarshalJSON()
				if err != nil {
					return b[:start], false
				}
				b = append(b, `,"payload":`...)
				b = append(b, p...)
			}
			if f.Expect != "" {
				b = append(b, `,"expect":"`...)
				b = append(b, f.Expect...)
				b = append(b, '"')
			}
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	for _, field := range [...]struct{ name, v string }{
		{`,"key":"`, r.Key}, {`,"idempotency_key":"`, r.IdempotencyKey}, {`,"run_at":"`, r.RunAt}, {`,"delay":"`, r.Delay},
	} {
		if field.v != "" {
			b = append(b, field.name...)
			b = append(b, field.v...)
			b = append(b, '"')
		}
	}
	return append(b, '}'), true
}

// sendManyReplyJSON is SendManyReply without its methods: what
// encoding/json reads by reflection.
type sendManyReplyJSON SendManyReply

// UnmarshalJSON reads the reply as encoding/json would, without reflection
// when every result has the shape of a queued batch as encoding/json writes
// it (SendReply.AppendJSON's); anything else (a refused batch, other
// spacing or order, escapes, unknown fields) is read by reflection.
func (r *SendManyReply) UnmarshalJSON(b []byte) error {
	if readSendManyReply(b, r) || string(b) == "null" { // null: unchanged, as encoding/json leaves a struct
		return nil
	}
	var v sendManyReplyJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = SendManyReply(v)
	return nil
}

// readSendManyReply reads b into r when it is exactly an object of one
// results array of queued batches in AppendJSON's shape, and says whether
// it was; r is changed only then.
func readSendManyReply(b []byte, r *SendManyReply) bool {
	b, ok := bytes.CutPrefix(b, []byte(`{"results":[`))
	if !ok {
		return false
	}
	results := make([]SendManyResult, 0, bytes.Count(b, []byte(`{"id":`)))
	if rest, ok := bytes.CutPrefix(b, []byte(`]}`)); ok && len(rest) == 0 {
		r.Results = results
		return true
	}
	for {
		var rep SendReply
		if b, ok = readSendReplyPrefix(b, &rep); !ok {
			return false
		}
		results = append(results, Queued(&rep))
		if rest, ok := bytes.CutPrefix(b, []byte(`,`)); ok {
			b = rest
			continue
		}
		if string(b) != "]}" {
			return false
		}
		r.Results = results
		return true
	}
}

// AppendJSON appends the reply as encoding/json writes it, without
// reflection: authz writes a send_many's reply with it. ok is false (and b
// unchanged) when a result is a refusal or a scheduled batch's, or one of
// its strings needs escaping; encoding/json then writes it.
func (r *SendManyReply) AppendJSON(b []byte) (out []byte, ok bool) {
	if r.Results == nil {
		return b, false
	}
	start := len(b)
	if cap(b)-len(b) < 16+56*len(r.Results) {
		b = append(make([]byte, 0, len(b)+16+56*len(r.Results)), b...)
	}
	b = append(b, `{"results":[`...)
	for i := range r.Results {
		res := &r.Results[i]
		if res.Failed() || res.ID == 0 || res.Domain == "" || res.Priority == "" || res.Error != "" {
			return b[:start], false
		}
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = res.Reply().AppendJSON(b); !ok {
			return b[:start], false
		}
	}
	return append(b, `]}`...), true
}
