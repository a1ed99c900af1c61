package records

import (
	"slices"
	"sync"

	"github.com/tickflow/tickflow/internal/wire"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// Hand-written msgpack codecs of the records on the hot path (tokens,
// batch records, callbacks, work requests and replies, completions), so
// that Encode and Decode pay no reflection for them. Each writes the very
// bytes msgpack/v5 writes for its struct tags with the default options
// (same keys, same order, same omitempty) and reads what msgpack/v5
// reads: unknown keys are skipped, nil reads as the zero value, an empty
// list as an empty (not nil) slice. EncodeMsgpack and DecodeMsgpack plug
// them into msgpack/v5 for code that encodes these records by reflection.

// EncodeMsgpack implements msgpack.CustomEncoder.
func (t Token) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &t) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (t *Token) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, t) }

// AppendMsgpack appends the token's msgpack encoding to b.
func (t *Token) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 4+wire.Count(t.Batch != nil, t.Again))
	b = wire.AppendUint8(wire.AppendString(b, "v"), t.V)
	b = wire.AppendUint64(wire.AppendString(b, "id"), t.BatchID)
	b = wire.AppendUint32(wire.AppendString(b, "gen"), t.Gen)
	b = wire.AppendUint32(wire.AppendString(b, "step"), t.Rotation)
	if t.Batch != nil {
		b = t.Batch.AppendMsgpack(wire.AppendString(b, "batch"))
	}
	if t.Again {
		b = wire.AppendBool(wire.AppendString(b, "again"), true)
	}
	return b
}

// ReadMsgpack reads a token from the start of b and returns the bytes after it.
func (t *Token) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *t = Token{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			t.V, b, err = wire.ReadUnsigned[uint8](b)
		case "id":
			t.BatchID, b, err = wire.ReadUnsigned[uint64](b)
		case "gen":
			t.Gen, b, err = wire.ReadUnsigned[uint32](b)
		case "step":
			t.Rotation, b, err = wire.ReadUnsigned[uint32](b)
		case "batch":
			t.Batch, b, err = wire.ReadPtr(t.Batch, b)
		case "again":
			t.Again, b, err = wire.ReadBool(b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// AppendMsgpack appends the event's msgpack encoding to b.
func (e *Event) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 2+wire.Count(e.Detail != ""))
	b = wire.AppendTime(wire.AppendString(b, "at"), e.At)
	b = wire.AppendString(wire.AppendString(b, "what"), e.What)
	if e.Detail != "" {
		b = wire.AppendString(wire.AppendString(b, "detail"), e.Detail)
	}
	return b
}

// ReadMsgpack reads an event from the start of b and returns the bytes after it.
func (e *Event) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *e = Event{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "at":
			e.At, b, err = wire.ReadTime(b)
		case "what":
			e.What, b, err = wire.ReadString(b)
		case "detail":
			e.Detail, b, err = wire.ReadString(b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (r BatchRecord) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &r) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *BatchRecord) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, r) }

// AppendMsgpack appends the batch record's msgpack encoding to b.
func (r *BatchRecord) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 6+wire.Count(r.Outcome != nil, r.IdempotencyKey != "", r.Fallback, r.DeadLetter != 0,
		r.ReplayedAs != 0, len(r.Outputs) > 0, !r.FinishedAt.IsZero(), len(r.History) > 0))
	b = wire.AppendUint8(wire.AppendString(b, "v"), r.V)
	b = r.Batch.AppendMsgpack(wire.AppendString(b, "batch"))
	b = wire.AppendString(wire.AppendString(b, "status"), string(r.Status))
	if r.Outcome != nil {
		b = r.Outcome.AppendMsgpack(wire.AppendString(b, "outcome"))
	}
	if r.IdempotencyKey != "" {
		b = wire.AppendString(wire.AppendString(b, "idem"), r.IdempotencyKey)
	}
	b = wire.AppendInt(wire.AppendString(b, "attempts"), int64(r.Attempts))
	if r.Fallback {
		b = wire.AppendBool(wire.AppendString(b, "fallback"), true)
	}
	if r.DeadLetter != 0 {
		b = wire.AppendUint64(wire.AppendString(b, "dead_letter"), r.DeadLetter)
	}
	if r.ReplayedAs != 0 {
		b = wire.AppendUint64(wire.AppendString(b, "replayed_as"), r.ReplayedAs)
	}
	if len(r.Outputs) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "outputs"), r.Outputs)
	}
	b = wire.AppendTime(wire.AppendString(b, "created_at"), r.CreatedAt)
	b = wire.AppendTime(wire.AppendString(b, "updated_at"), r.UpdatedAt)
	if !r.FinishedAt.IsZero() {
		b = wire.AppendTime(wire.AppendString(b, "finished_at"), r.FinishedAt)
	}
	if len(r.History) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "history"), r.History)
	}
	return b
}

// ReadMsgpack reads a batch record from the start of b and returns the bytes after it.
func (r *BatchRecord) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *r = BatchRecord{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			r.V, b, err = wire.ReadUnsigned[uint8](b)
		case "batch":
			b, err = r.Batch.ReadMsgpack(b)
		case "status":
			r.Status, b, err = wire.ReadEnum(b, statuses)
		case "outcome":
			r.Outcome, b, err = wire.ReadPtr(r.Outcome, b)
		case "idem":
			r.IdempotencyKey, b, err = wire.ReadString(b)
		case "attempts":
			r.Attempts, b, err = wire.ReadSigned[int](b)
		case "fallback":
			r.Fallback, b, err = wire.ReadBool(b)
		case "dead_letter":
			r.DeadLetter, b, err = wire.ReadUnsigned[uint64](b)
		case "replayed_as":
			r.ReplayedAs, b, err = wire.ReadUnsigned[uint64](b)
		case "outputs":
			r.Outputs, b, err = wire.ReadSlice[pipeline.Output](b)
		case "created_at":
			r.CreatedAt, b, err = wire.ReadTime(b)
		case "updated_at":
			r.UpdatedAt, b, err = wire.ReadTime(b)
		case "finished_at":
			r.FinishedAt, b, err = wire.ReadTime(b)
		case "history":
			r.History, b, err = wire.ReadSlice[Event](b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c Callback) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &c) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *Callback) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, c) }

// AppendMsgpack appends the callback's msgpack encoding to b.
func (c *Callback) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 7+wire.Count(c.Processor != "", c.Fallback, c.DeadLetter != 0, len(c.Outputs) > 0, len(c.Trace) > 0))
	b = wire.AppendUint8(wire.AppendString(b, "v"), c.V)
	b = wire.AppendUint64(wire.AppendString(b, "id"), c.BatchID)
	b = wire.AppendString(wire.AppendString(b, "domain"), c.Domain)
	b = wire.AppendString(wire.AppendString(b, "priority"), string(c.Priority))
	b = c.Outcome.AppendMsgpack(wire.AppendString(b, "outcome"))
	b = wire.AppendInt(wire.AppendString(b, "attempts"), int64(c.Attempts))
	b = wire.AppendTime(wire.AppendString(b, "at"), c.At)
	if c.Processor != "" {
		b = wire.AppendString(wire.AppendString(b, "processor"), c.Processor)
	}
	if c.Fallback {
		b = wire.AppendBool(wire.AppendString(b, "fallback"), true)
	}
	if c.DeadLetter != 0 {
		b = wire.AppendUint64(wire.AppendString(b, "dead_letter"), c.DeadLetter)
	}
	if len(c.Outputs) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "outputs"), c.Outputs)
	}
	if len(c.Trace) > 0 {
		b = appendStringMap(wire.AppendString(b, "trace"), c.Trace)
	}
	return b
}

// ReadMsgpack reads a callback from the start of b and returns the bytes after it.
func (c *Callback) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *c = Callback{} }, c.readField)
}

// readField reads the value of the callback's field k from the start of b
// and returns the bytes after it; an unknown key is skipped.
func (c *Callback) readField(k, b []byte) (_ []byte, err error) {
	switch string(k) {
	case "v":
		c.V, b, err = wire.ReadUnsigned[uint8](b)
	case "id":
		c.BatchID, b, err = wire.ReadUnsigned[uint64](b)
	case "domain":
		c.Domain, b, err = wire.ReadString(b)
	case "priority":
		c.Priority, b, err = wire.ReadEnum(b, priorities)
	case "outcome":
		b, err = c.Outcome.ReadMsgpack(b)
	case "attempts":
		c.Attempts, b, err = wire.ReadSigned[int](b)
	case "at":
		c.At, b, err = wire.ReadTime(b)
	case "processor":
		c.Processor, b, err = wire.ReadString(b)
	case "fallback":
		c.Fallback, b, err = wire.ReadBool(b)
	case "dead_letter":
		c.DeadLetter, b, err = wire.ReadUnsigned[uint64](b)
	case "outputs":
		c.Outputs, b, err = wire.ReadSlice[pipeline.Output](b)
	case "trace":
		c.Trace, b, err = readStringMap(c.Trace, b)
	default:
		b, err = wire.Skip(b)
	}
	return b, err
}

// AppendMsgpack appends the call's msgpack encoding to b.
func (w *WorkCall) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 2+wire.Count(len(w.Payload) > 0))
	b = wire.AppendInt(wire.AppendString(b, "index"), int64(w.Index))
	b = wire.AppendString(wire.AppendString(b, "type"), w.Type)
	if len(w.Payload) > 0 {
		b = append(wire.AppendString(b, "payload"), w.Payload...)
	}
	return b
}

// ReadMsgpack reads a call from the start of b and returns the bytes after it.
func (w *WorkCall) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *w = WorkCall{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "index":
			w.Index, b, err = wire.ReadSigned[int](b)
		case "type":
			w.Type, b, err = wire.ReadString(b)
		case "payload":
			w.Payload, b, err = wire.ReadPayload(b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// AppendMsgpack appends the inclusion call's msgpack encoding to b.
func (c *InclusionCall) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, wire.Count(c.Ref != "", c.Hook != "", c.Output != nil))
	if c.Ref != "" {
		b = wire.AppendString(wire.AppendString(b, "ref"), c.Ref)
	}
	if c.Hook != "" {
		b = wire.AppendString(wire.AppendString(b, "hook"), c.Hook)
	}
	if c.Output != nil {
		b = c.Output.AppendMsgpack(wire.AppendString(b, "output"))
	}
	return b
}

// ReadMsgpack reads an inclusion call from the start of b and returns the bytes after it.
func (c *InclusionCall) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *c = InclusionCall{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "ref":
			c.Ref, b, err = wire.ReadString(b)
		case "hook":
			c.Hook, b, err = wire.ReadString(b)
		case "output":
			c.Output, b, err = wire.ReadPtr(c.Output, b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (w WorkRequest) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &w) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (w *WorkRequest) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, w) }

// AppendMsgpack appends the work request's msgpack encoding to b.
func (w *WorkRequest) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 7+wire.Count(w.Key != "", w.Submitter != "", w.Label != "", w.Unit, len(w.Inputs) > 0,
		w.Retry != nil, w.Failure != nil, w.Sender != "", w.Inclusion != nil, len(w.Trace) > 0))
	b = wire.AppendUint8(wire.AppendString(b, "v"), w.V)
	b = wire.AppendUint64(wire.AppendString(b, "id"), w.BatchID)
	b = wire.AppendString(wire.AppendString(b, "domain"), w.Domain)
	if w.Key != "" {
		b = wire.AppendString(wire.AppendString(b, "key"), w.Key)
	}
	b = wire.AppendTime(wire.AppendString(b, "created_at"), w.CreatedAt)
	if w.Submitter != "" {
		b = wire.AppendString(wire.AppendString(b, "submitter"), w.Submitter)
	}
	if w.Label != "" {
		b = wire.AppendString(wire.AppendString(b, "label"), w.Label)
	}
	b = wire.AppendInt(wire.AppendString(b, "attempt"), int64(w.Attempt))
	b = wire.AppendInt(wire.AppendString(b, "round"), int64(w.Round))
	if w.Unit {
		b = wire.AppendBool(wire.AppendString(b, "unit"), true)
	}
	b = wire.AppendSlice(wire.AppendString(b, "calls"), w.Calls)
	if len(w.Inputs) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "inputs"), w.Inputs)
	}
	if w.Retry != nil {
		b = w.Retry.AppendMsgpack(wire.AppendString(b, "retry"))
	}
	if w.Failure != nil {
		b = w.Failure.AppendMsgpack(wire.AppendString(b, "failure"))
	}
	if w.Sender != "" {
		b = wire.AppendString(wire.AppendString(b, "sender"), w.Sender)
	}
	if w.Inclusion != nil {
		b = w.Inclusion.AppendMsgpack(wire.AppendString(b, "inclusion"))
	}
	if len(w.Trace) > 0 {
		b = appendStringMap(wire.AppendString(b, "trace"), w.Trace)
	}
	return b
}

// ReadMsgpack reads a work request from the start of b and returns the bytes after it.
func (w *WorkRequest) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *w = WorkRequest{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			w.V, b, err = wire.ReadUnsigned[uint8](b)
		case "id":
			w.BatchID, b, err = wire.ReadUnsigned[uint64](b)
		case "domain":
			w.Domain, b, err = wire.ReadString(b)
		case "key":
			w.Key, b, err = wire.ReadString(b)
		case "created_at":
			w.CreatedAt, b, err = wire.ReadTime(b)
		case "submitter":
			w.Submitter, b, err = wire.ReadString(b)
		case "label":
			w.Label, b, err = wire.ReadString(b)
		case "attempt":
			w.Attempt, b, err = wire.ReadSigned[int](b)
		case "round":
			w.Round, b, err = wire.ReadSigned[int](b)
		case "unit":
			w.Unit, b, err = wire.ReadBool(b)
		case "calls":
			w.Calls, b, err = wire.ReadSlice[WorkCall](b)
		case "inputs":
			w.Inputs, b, err = wire.ReadSlice[pipeline.Output](b)
		case "retry":
			w.Retry, b, err = wire.ReadPtr(w.Retry, b)
		case "failure":
			w.Failure, b, err = wire.ReadPtr(w.Failure, b)
		case "sender":
			w.Sender, b, err = wire.ReadString(b)
		case "inclusion":
			w.Inclusion, b, err = wire.ReadPtr(w.Inclusion, b)
		case "trace":
			w.Trace, b, err = readStringMap(w.Trace, b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// AppendMsgpack appends the work error's msgpack encoding to b.
func (e *WorkError) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 3+wire.Count(len(e.Codes) > 0, e.Permanent, e.NoFallback, e.NoHook, e.Busy))
	b = wire.AppendString(wire.AppendString(b, "message"), e.Message)
	if len(e.Codes) > 0 {
		b = wire.AppendStrings(wire.AppendString(b, "codes"), e.Codes)
	}
	if e.Permanent {
		b = wire.AppendBool(wire.AppendString(b, "permanent"), true)
	}
	b = wire.AppendBool(wire.AppendString(b, "retryable"), e.Retryable)
	b = wire.AppendInt(wire.AppendString(b, "index"), int64(e.Index))
	if e.NoFallback {
		b = wire.AppendBool(wire.AppendString(b, "no_fallback"), true)
	}
	if e.NoHook {
		b = wire.AppendBool(wire.AppendString(b, "no_hook"), true)
	}
	if e.Busy {
		b = wire.AppendBool(wire.AppendString(b, "busy"), true)
	}
	return b
}

// ReadMsgpack reads a work error from the start of b and returns the bytes after it.
func (e *WorkError) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *e = WorkError{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "message":
			e.Message, b, err = wire.ReadString(b)
		case "codes":
			e.Codes, b, err = wire.ReadStrings(b)
		case "permanent":
			e.Permanent, b, err = wire.ReadBool(b)
		case "retryable":
			e.Retryable, b, err = wire.ReadBool(b)
		case "index":
			e.Index, b, err = wire.ReadSigned[int](b)
		case "no_fallback":
			e.NoFallback, b, err = wire.ReadBool(b)
		case "no_hook":
			e.NoHook, b, err = wire.ReadBool(b)
		case "busy":
			e.Busy, b, err = wire.ReadBool(b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (c Completion) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &c) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (c *Completion) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, c) }

// AppendMsgpack appends the completion's msgpack encoding to b.
func (c *Completion) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 1+wire.Count(c.Running, !c.Until.IsZero(), c.Worker != "", len(c.Outputs) > 0))
	b = wire.AppendUint8(wire.AppendString(b, "v"), c.V)
	if c.Running {
		b = wire.AppendBool(wire.AppendString(b, "running"), true)
	}
	if !c.Until.IsZero() {
		b = wire.AppendTime(wire.AppendString(b, "until"), c.Until)
	}
	if c.Worker != "" {
		b = wire.AppendString(wire.AppendString(b, "worker"), c.Worker)
	}
	if len(c.Outputs) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "outputs"), c.Outputs)
	}
	return b
}

// ReadMsgpack reads a completion from the start of b and returns the bytes after it.
func (c *Completion) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *c = Completion{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			c.V, b, err = wire.ReadUnsigned[uint8](b)
		case "running":
			c.Running, b, err = wire.ReadBool(b)
		case "until":
			c.Until, b, err = wire.ReadTime(b)
		case "worker":
			c.Worker, b, err = wire.ReadString(b)
		case "outputs":
			c.Outputs, b, err = wire.ReadSlice[pipeline.Output](b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (g UnitGroup) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &g) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (g *UnitGroup) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, g) }

// AppendMsgpack appends the unit group's msgpack encoding to b.
func (g *UnitGroup) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 1+wire.Count(len(g.Units) > 0))
	b = wire.AppendUint8(wire.AppendString(b, "v"), g.V)
	if len(g.Units) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "units"), g.Units)
	}
	return b
}

// ReadMsgpack reads a unit group from the start of b and returns the bytes after it.
func (g *UnitGroup) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *g = UnitGroup{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			g.V, b, err = wire.ReadUnsigned[uint8](b)
		case "units":
			g.Units, b, err = wire.ReadSlice[UnitEntry](b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (e UnitEntry) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &e) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (e *UnitEntry) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, e) }

// AppendMsgpack appends the unit entry's msgpack encoding to b.
func (e *UnitEntry) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 1+wire.Count(e.Running, e.Released, e.Own, e.Claim != 0, !e.Until.IsZero(), e.Worker != "", len(e.Outputs) > 0))
	b = wire.AppendString(wire.AppendString(b, "key"), e.Key)
	if e.Running {
		b = wire.AppendBool(wire.AppendString(b, "running"), true)
	}
	if e.Released {
		b = wire.AppendBool(wire.AppendString(b, "released"), true)
	}
	if e.Own {
		b = wire.AppendBool(wire.AppendString(b, "own"), true)
	}
	if e.Claim != 0 {
		b = wire.AppendUint64(wire.AppendString(b, "claim"), e.Claim)
	}
	if !e.Until.IsZero() {
		b = wire.AppendTime(wire.AppendString(b, "until"), e.Until)
	}
	if e.Worker != "" {
		b = wire.AppendString(wire.AppendString(b, "worker"), e.Worker)
	}
	if len(e.Outputs) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "outputs"), e.Outputs)
	}
	return b
}

// ReadMsgpack reads a unit entry from the start of b and returns the bytes after it.
func (e *UnitEntry) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *e = UnitEntry{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "key":
			e.Key, b, err = wire.ReadString(b)
		case "running":
			e.Running, b, err = wire.ReadBool(b)
		case "released":
			e.Released, b, err = wire.ReadBool(b)
		case "own":
			e.Own, b, err = wire.ReadBool(b)
		case "claim":
			e.Claim, b, err = wire.ReadUnsigned[uint64](b)
		case "until":
			e.Until, b, err = wire.ReadTime(b)
		case "worker":
			e.Worker, b, err = wire.ReadString(b)
		case "outputs":
			e.Outputs, b, err = wire.ReadSlice[pipeline.Output](b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (w WorkReply) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &w) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (w *WorkReply) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, w) }

// AppendMsgpack appends the work reply's msgpack encoding to b.
func (w *WorkReply) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 1+wire.Count(len(w.Outputs) > 0, w.Error != nil, w.Recorded, w.Fresh, w.Included))
	b = wire.AppendUint8(wire.AppendString(b, "v"), w.V)
	if len(w.Outputs) > 0 {
		b = wire.AppendSlice(wire.AppendString(b, "outputs"), w.Outputs)
	}
	if w.Error != nil {
		b = w.Error.AppendMsgpack(wire.AppendString(b, "error"))
	}
	if w.Recorded {
		b = wire.AppendBool(wire.AppendString(b, "recorded"), true)
	}
	if w.Fresh {
		b = wire.AppendBool(wire.AppendString(b, "fresh"), true)
	}
	if w.Included {
		b = wire.AppendBool(wire.AppendString(b, "included"), true)
	}
	return b
}

// ReadMsgpack reads a work reply from the start of b and returns the bytes after it.
func (w *WorkReply) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *w = WorkReply{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			w.V, b, err = wire.ReadUnsigned[uint8](b)
		case "outputs":
			w.Outputs, b, err = wire.ReadSlice[pipeline.Output](b)
		case "error":
			w.Error, b, err = wire.ReadPtr(w.Error, b)
		case "recorded":
			w.Recorded, b, err = wire.ReadBool(b)
		case "fresh":
			w.Fresh, b, err = wire.ReadBool(b)
		case "included":
			w.Included, b, err = wire.ReadBool(b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (w WorkBatch) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &w) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (w *WorkBatch) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, w) }

// AppendMsgpack appends the work batch's msgpack encoding to b.
func (w *WorkBatch) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 2)
	b = wire.AppendUint8(wire.AppendString(b, "v"), w.V)
	return wire.AppendSlice(wire.AppendString(b, "units"), w.Units)
}

// ReadMsgpack reads a work batch from the start of b and returns the bytes after it.
func (w *WorkBatch) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *w = WorkBatch{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			w.V, b, err = wire.ReadUnsigned[uint8](b)
		case "units":
			w.Units, b, err = wire.ReadSlice[WorkRequest](b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (w WorkBatchReply) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &w) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (w *WorkBatchReply) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, w) }

// AppendMsgpack appends the work batch reply's msgpack encoding to b.
func (w *WorkBatchReply) AppendMsgpack(b []byte) []byte {
	b = wire.AppendMapHeader(b, 2)
	b = wire.AppendUint8(wire.AppendString(b, "v"), w.V)
	return wire.AppendSlice(wire.AppendString(b, "replies"), w.Replies)
}

// ReadMsgpack reads a work batch reply from the start of b and returns the bytes after it.
func (w *WorkBatchReply) ReadMsgpack(b []byte) ([]byte, error) {
	return wire.ReadMap(b, func() { *w = WorkBatchReply{} }, func(k, b []byte) (_ []byte, err error) {
		switch string(k) {
		case "v":
			w.V, b, err = wire.ReadUnsigned[uint8](b)
		case "replies":
			w.Replies, b, err = wire.ReadSlice[WorkReply](b)
		default:
			b, err = wire.Skip(b)
		}
		return b, err
	})
}

// appendStringMap appends m with its keys sorted, so that the same map
// always has the same bytes (msgpack/v5 writes them in map order).
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return wire.AppendNil(b)
	}
	b = wire.AppendMapHeader(b, len(m))
	if len(m) == 1 {
		for k, v := range m {
			return wire.AppendString(wire.AppendString(b, k), v)
		}
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = wire.AppendString(wire.AppendString(b, k), m[k])
	}
	return b
}

// readStringMap reads a map of strings into m (made if nil), as msgpack/v5
// decodes a map[string]string: nil reads as nil.
func readStringMap(m map[string]string, b []byte) (map[string]string, []byte, error) {
	n, b, err := wire.ReadMapHeader(b)
	if err != nil || n < 0 {
		return nil, b, err
	}
	if m == nil {
		m = make(map[string]string, min(n, len(b)/2))
	}
	for range n {
		var k, v string
		if k, b, err = wire.ReadString(b); err != nil {
			return nil, b, err
		}
		if v, b, err = wire.ReadString(b); err != nil {
			return nil, b, err
		}
		m[k] = v
	}
	return m, b, nil
}

// sliceReader is a pooled decoder of a record's bytes; the hand-written
// codecs of the types inside the record read them in place.
type sliceReader struct {
	r   wire.SliceReader
	dec *msgpack.Decoder
}

var readers = sync.Pool{New: func() any { return &sliceReader{dec: msgpack.NewDecoder(nil)} }}

// decodeReflect decodes b into v by msgpack's reflection, with a pooled
// decoder. A decoder whose Decode panicked is not pooled again.
func decodeReflect(b []byte, v any) error {
	sr := readers.Get().(*sliceReader)
	sr.r.Reset(b)
	sr.dec.Reset(&sr.r)
	err := sr.dec.Decode(v)
	sr.r.Reset(nil)
	sr.dec.Reset(nil)
	readers.Put(sr)
	return err
}

// The values of the enumerations records carry, which the readers return
// without allocating a string.
var (
	priorities = []pipeline.Priority{pipeline.High, pipeline.Med}
	statuses   = []pipeline.Status{pipeline.InProcess, pipeline.Executed, pipeline.Rejected, pipeline.PartiallyExecuted,
		pipeline.RemovedByOwner, pipeline.Expired}
)
