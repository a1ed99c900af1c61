package submit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Ack is what a stream answered to a stored message.
type Ack struct {
	Seq       uint64
	Duplicate bool
}

// Publish stores m on its stream and returns the stream's acknowledgement:
// jetstream's PublishMsg, with the acknowledgement the server writes from
// its template ({"stream":…,"seq":…}) read without reflection. A submit
// waits for two of them, and encoding/json cost as much as the rest of the
// client's publish. An answer that is not such an acknowledgement stored
// nothing (an error, or no stream listening); the message is then
// published again through jetstream's PublishMsg, which retries a stream
// that is not there yet and words the error (errors.Is matches jetstream's
// sentinels). Publish does not modify m.
func Publish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (Ack, error) {
	ctx, cancel := withDeadline(ctx, js)
	defer cancel()
	resp, err := js.Conn().RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
	case err != nil:
		return Ack{}, err
	default:
		if a, ok := readAck(resp.Data); ok {
			return a, nil
		}
	}
	pa, err := js.PublishMsg(ctx, m)
	if err != nil {
		return Ack{}, err
	}
	return Ack{Seq: pa.Sequence, Duplicate: pa.Duplicate}, nil
}

// withDeadline bounds a ctx without a deadline by js's default timeout,
// as jetstream does for its own publishes: a publish the server drops
// (one it refuses for permissions, say) is answered by no one.
func withDeadline(ctx context.Context, js jetstream.JetStream) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, js.Options().DefaultTimeout)
}

// readAck reads a successful acknowledgement; ok is false for anything
// else (an error answer above all).
func readAck(b []byte) (a Ack, ok bool) {
	const stream = `{"stream":"`
	if !bytes.HasPrefix(b, []byte(stream)) {
		return readAckJSON(b)
	}
	r := b[len(stream):]
	end := bytes.IndexByte(r, '"')
	if end <= 0 || bytes.IndexByte(r[:end], '\\') >= 0 {
		return readAckJSON(b)
	}
	r = r[end+1:]
	const seq = `,"seq":`
	if !bytes.HasPrefix(r, []byte(seq)) {
		return readAckJSON(b) // a domain, say
	}
	r = r[len(seq):]
	n := 0
	for n < len(r) && r[n] >= '0' && r[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(r[:n]), 10, 64)
	if n == 0 || err != nil {
		return readAckJSON(b)
	}
	switch rest := string(r[n:]); rest {
	case "}":
		return Ack{Seq: v}, true
	case `,"duplicate": true}`, `,"duplicate":true}`:
		return Ack{Seq: v, Duplicate: true}, true
	}
	return readAckJSON(b)
}

// readAckJSON reads any other answer as jetstream does: a PubAck names
// its stream, an error answer has an error.
func readAckJSON(b []byte) (Ack, bool) {
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if json.Unmarshal(b, &r) != nil || r.Error != nil || r.Stream == "" {
		return Ack{}, false
	}
	return Ack{Seq: r.Seq, Duplicate: r.Duplicate}, true
}

// createHeader makes a KV write a create: the key must have no revision.
// Shared and never modified: publishing only reads a message's header.
var createHeader = nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}

// CreateKey is kv.Create(ctx, key, data) written as Publish writes: the
// acknowledgement of a stored key read without reflection. Any other
// answer stored nothing, and the write is made again by kv.Create, which
// decides it: a key whose last revision is a delete or purge is created on
// it, one that exists is an error matching jetstream.ErrKeyExists.
func CreateKey(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, key string, data []byte) (uint64, error) {
	m := &nats.Msg{Subject: "$KV." + kv.Bucket() + "." + key, Header: createHeader, Data: data}
	ctx, cancel := withDeadline(ctx, js)
	defer cancel()
	resp, err := js.Conn().RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
	case err != nil:
		return 0, err
	default:
		if a, ok := readAck(resp.Data); ok {
			return a.Seq, nil
		}
	}
	return kv.Create(ctx, key, data)
}
