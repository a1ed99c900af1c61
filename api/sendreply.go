package api

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/tickflow/tickflow/pipeline"
)

// sendReplyJSON is SendReply without its methods: what encoding/json
// reads by reflection.
type sendReplyJSON SendReply

// AppendJSON appends the reply as encoding/json writes it, without
// reflection: authz writes the hottest reply with it. ok is false (and b
// unchanged) when one of its strings needs escaping, which domains and
// priorities never do, or when it has a RunAt (a scheduled batch's reply
// is left to encoding/json).
func (r *SendReply) AppendJSON(b []byte) (out []byte, ok bool) {
	if !plainJSON(r.Domain) || !plainJSON(string(r.Priority)) || !r.RunAt.IsZero() {
		return b, false
	}
	b = append(b, `{"id":`...)
	b = strconv.AppendUint(b, r.ID, 10)
	b = append(b, `,"domain":"`...)
	b = append(b, r.Domain...)
	b = append(b, `","priority":"`...)
	b = append(b, r.Priority...)
	b = append(b, '"')
	if r.Duplicate {
		b = append(b, `,"duplicate":true`...)
	}
	return append(b, '}'), true
}

// UnmarshalJSON reads the reply as encoding/json would, without
// reflection when it has the shape authz writes (AppendJSON); anything else
// (other spacing or order, escapes, unknown fields) is read by
// reflection.
func (r *SendReply) UnmarshalJSON(b []byte) error {
	if readSendReply(b, r) || string(b) == "null" { // null: unchanged, as encoding/json leaves a struct
		return nil
	}
	var v sendReplyJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = SendReply(v)
	return nil
}

// readSendReply reads b into r when it is exactly in AppendJSON's shape,
// and says whether it was; r is changed only then.
func readSendReply(b []byte, r *SendReply) bool {
	var rep SendReply
	rest, ok := readSendReplyPrefix(b, &rep)
	if !ok || len(rest) > 0 {
		return false
	}
	*r = rep
	return true
}

// readSendReplyPrefix reads a reply in AppendJSON's shape from the start of
// b into r and returns what follows it; r is changed only when ok.
func readSendReplyPrefix(b []byte, r *SendReply) (rest []byte, ok bool) {
	b, ok = bytes.CutPrefix(b, []byte(`{"id":`))
	if !ok {
		return nil, false
	}
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || (n > 1 && b[0] == '0') {
		return nil, false
	}
	id, err := strconv.ParseUint(string(b[:n]), 10, 64)
	if err != nil {
		return nil, false
	}
	if b, ok = bytes.CutPrefix(b[n:], []byte(`,"domain":"`)); !ok {
		return nil, false
	}
	domain, b, ok := plainString(b)
	if !ok {
		return nil, false
	}
	if b, ok = bytes.CutPrefix(b, []byte(`,"priority":"`)); !ok {
		return nil, false
	}
	prio, b, ok := plainString(b)
	if !ok {
		return nil, false
	}
	dup := false
	if rest, ok := bytes.CutPrefix(b, []byte(`,"duplicate":true`)); ok {
		dup, b = true, rest
	}
	rest, ok = bytes.CutPrefix(b, []byte(`}`))
	if !ok {
		return nil, false
	}
	*r = SendReply{ID: id, Domain: string(domain), Priority: pipeline.Priority(prio), Duplicate: dup}
	return rest, true
}

// plainString reads a JSON string's content up to its closing quote, and
// what follows it; ok is false when the content is not plain (plainJSON).
func plainString(b []byte) (s, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '"')
	if i < 0 || !plainJSON(string(b[:i])) {
		return nil, nil, false
	}
	return b[:i], b[i+1:], true
}

// plainJSON says whether s is written as itself inside a JSON string by
// encoding/json: printable ASCII without quotes, backslashes or the
// characters it escapes for HTML.
func plainJSON(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
