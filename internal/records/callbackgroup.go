package records

import (
	"fmt"

	"github.com/tickflow/tickflow/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// CallbackGroupMax is the most callbacks one CallbackGroup carries: the
// most a processor puts in one, and the most authz applies from one
// message (a processor is trusted for its domain only, so one message of
// its must not cost authz more than this).
const CallbackGroupMax = 64

// CallbackGroupOverhead bounds the bytes a CallbackGroup's body takes
// beside its members' encodings.
const CallbackGroupOverhead = 32

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
// single Callback (streams.CallbackMsg) or a CallbackGroup
// (streams.CallbackGroupMsg), and returns its callbacks, in order, and
// whether it was a group. Malformed bytes, or a group without members,
// give an error matching ErrDecode; a body or member of another version,
// one matching ErrVersion, with what was read (whose V says the version).
// It never panics.
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
