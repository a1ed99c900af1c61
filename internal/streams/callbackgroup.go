package streams

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// CallbackGroupMax is the most callbacks one CallbackGroup carries: the
// most a processor puts in one, and the most authz applies from one
// message (a processor is trusted for its domain only, so one message of
// its must not cost authz more than this).
const CallbackGroupMax = 64

// KindCallbacks is the HeaderKind of a CallbackGroup's message.
const KindCallbacks = "callbacks"

// Headers of a CallbackGroup's message, so that `nats stream view` says
// what it holds.
const (
	// HeaderCount is how many callbacks the group holds.
	HeaderCount = "Count"
	// HeaderFirstBatchID and HeaderLastBatchID are its first and last
	// members' batch ids.
	HeaderFirstBatchID = "First-Batch-Id"
	HeaderLastBatchID  = "Last-Batch-Id"
)

// CallbackGroup is the terminal callbacks of several batches of one
// domain, published as one message on the domain's callback subject: one
// stored message and one delivery for many finished batches. Its body is
// told from a single Callback's by its "callbacks" field, which a single
// callback never has; DecodeCallbacks reads either.
type CallbackGroup struct {
	V         uint8      `msgpack:"v"`
	Callbacks []Callback `msgpack:"callbacks"`
}

func (g *CallbackGroup) version() uint8 { return g.V }
func (g *CallbackGroup) setVersion()    { g.V = WireVersion }

// EncodeMsgpack implements msgpack.CustomEncoder.
func (g CallbackGroup) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &g) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (g *CallbackGroup) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, g) }

// AppendMsgpack appends the callback group's msgpack encoding to b.
func (g *CallbackGroup) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 2)
	b = wire.AppendUint8(wire.AppendString(b, "v"), g.V)
	return wire.AppendSlice(wire.AppendString(b, "callbacks"), g.Callbacks)
}

// ReadMsgpack reads a callback group from the start of b and returns the bytes after it.
func (g *CallbackGroup) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *g = CallbackGroup{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			g.V, b, err = wire.ReadUnsigned[uint8](b)
		case "callbacks":
			g.Callbacks, b, err = wire.ReadSlice[Callback](b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// callbackBody reads the body of a message on a callback subject, either
// form: a single callback's fields into cb, or a group's members into
// members (group set).
type callbackBody struct {
	cb      Callback
	members []Callback
	group   bool
}

func (c *callbackBody) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *c = callbackBody{} }, func(k, b []byte) (_ []byte, err error) {
		if string(k) == "callbacks" {
			c.group = true
			c.members, b, err = wire.ReadSlice[Callback](b)
			return b, err
		}
		return c.cb.readField(k, b)
	})
}

// DecodeCallbacks reads the body of a message on a callback subject: a
// single Callback (CallbackMsg) or a CallbackGroup (CallbackGroupMsg), and
// returns its callbacks, in order, and whether it was a group. Malformed
// bytes, or a group without members, give an error matching ErrDecode; a
// body or member of another version, one matching ErrVersion, with what
// was read (whose V says the version). It never panics.
func DecodeCallbacks(data []byte) (cbs []Callback, group bool, err error) {
	var body callbackBody
	defer func() {
		if r := recover(); r != nil {
			cbs, err = nil, fmt.Errorf("%w callbacks: %v", ErrDecode, r)
		}
	}()
	if _, err := body.ReadMsgpack(data); err != nil {
		return nil, body.group, fmt.Errorf("%w callbacks: %w", ErrDecode, err)
	}
	// The version is the message's: the single callback's, or the group's.
	if v := body.cb.V; v != WireVersion {
		if !body.group {
			return []Callback{body.cb}, false, fmt.Errorf("%w: callback version %d, this build reads %d", ErrVersion, v, WireVersion)
		}
		return []Callback{{V: v}}, true, fmt.Errorf("%w: callback version %d, this build reads %d", ErrVersion, v, WireVersion)
	}
	if !body.group {
		return []Callback{body.cb}, false, nil
	}
	if len(body.members) == 0 {
		return nil, true, fmt.Errorf("%w callbacks: a callback group without members", ErrDecode)
	}
	for i := range body.members {
		if v := body.members[i].V; v != WireVersion {
			return []Callback{{V: v}}, true, fmt.Errorf("%w: callback %d of a group has version %d, this build reads %d", ErrVersion, i, v, WireVersion)
		}
	}
	return body.members, true, nil
}

// CallbackGroupMsg builds the message of a group of terminal callbacks of
// domain, with readable headers. It has no deduplication id: one per
// member cannot be given, so a member may be stored again after a crash
// (in another group, or alone), and authz applies a batch's first
// callback only (see docs/architecture.md).
func CallbackGroupMsg(domain string, cbs []Callback) (*nats.Msg, error) {
	msgs := make([]*nats.Msg, len(cbs))
	for i := range cbs {
		m, err := CallbackMsg(&cbs[i])
		if err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	return JoinCallbacks(domain, msgs)
}

// JoinCallbacks joins single callback messages of domain (CallbackMsg's)
// into one CallbackGroup message, as CallbackGroupMsg builds it, from
// their bodies as they are: nothing is decoded or encoded again. The
// members keep their order.
func JoinCallbacks(domain string, msgs []*nats.Msg) (*nats.Msg, error) {
	if len(msgs) == 0 {
		return nil, errors.New("streams: a callback group needs at least one callback")
	}
	size := CallbackGroupOverhead
	for _, m := range msgs {
		size += len(m.Data)
	}
	b := make([]byte, 0, size)
	b = wire.AppendMapHeader(b, 2)
	b = wire.AppendUint8(wire.AppendString(b, "v"), WireVersion)
	b = wire.AppendArrayHeader(wire.AppendString(b, "callbacks"), len(msgs))
	for _, m := range msgs {
		b = append(b, m.Data...)
	}
	g := nats.NewMsg(CallbackSubject(domain))
	g.Data = b
	g.Header.Set(HeaderKind, KindCallbacks)
	g.Header.Set(HeaderDomain, domain)
	g.Header.Set(HeaderCount, strconv.Itoa(len(msgs)))
	g.Header.Set(HeaderFirstBatchID, msgs[0].Header.Get(HeaderBatchID))
	g.Header.Set(HeaderLastBatchID, msgs[len(msgs)-1].Header.Get(HeaderBatchID))
	return g, nil
}

// CallbackGroupOverhead bounds the bytes a CallbackGroup's body takes
// beside its members' encodings.
const CallbackGroupOverhead = 32

// CallbacksIn is how many batches' callbacks a message on a callback
// subject with headers h carries, from its headers alone: a group's Count,
// and one for a single callback (or a group whose count does not read).
func CallbacksIn(h nats.Header) int {
	if h.Get(HeaderKind) == KindCallbacks {
		if n, err := strconv.Atoi(h.Get(HeaderCount)); err == nil && n > 0 {
			return n
		}
	}
	return 1
}
