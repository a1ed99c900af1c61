package pipeline

import (
	"strconv"
	"time"

	"github.com/tickflow/tickflow/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Hand-written msgpack codecs of the types that travel in every wire
// record (a batch, its functions, an outcome, an output), so that no
// record pays msgpack's reflection for them. Each writes the very bytes
// msgpack/v5 writes for its struct tags with the default options (same
// keys, same order, same omitempty), and reads what msgpack/v5 reads:
// unknown keys are skipped, nil reads as the zero value, an empty list as
// an empty (not nil) slice. AppendMsgpack and ReadMsgpack are the fast
// path, on byte slices; EncodeMsgpack and DecodeMsgpack plug them into
// msgpack/v5 for records that embed these types and are encoded by
// reflection. The tests prove both directions against msgpack/v5's own
// codec.

// EncodeMsgpack implements msgpack.CustomEncoder.
func (b Batch) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &b) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (b *Batch) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, b) }

// AppendMsgpack appends the batch's msgpack encoding to buf.
func (b *Batch) AppendMsgpack(buf []byte) []byte {
	n := 6
	n += wire.Count(b.Label != "", b.Submitter != "", b.Key != "", !b.ExpiresAt.IsZero(), b.ReplayOf != 0, !b.RunAt.IsZero())
	buf = wire.AppendMapHeader(buf, n)
	buf = wire.AppendUint64(wire.AppendString(buf, "id"), b.ID)
	buf = wire.AppendString(wire.AppendString(buf, "domain"), b.Domain)
	if b.Label != "" {
		buf = wire.AppendString(wire.AppendString(buf, "label"), b.Label)
	}
	if b.Submitter != "" {
		buf = wire.AppendString(wire.AppendString(buf, "submitter"), b.Submitter)
	}
	buf = wire.AppendString(buf, "functions")
	if b.Functions == nil {
		buf = wire.AppendNil(buf)
	} else {
		buf = wire.AppendArrayHeader(buf, len(b.Functions))
		for i := range b.Functions {
			buf = b.Functions[i].AppendMsgpack(buf)
		}
	}
	buf = b.Subroutine.AppendMsgpack(wire.AppendString(buf, "subroutine"))
	buf = wire.AppendString(wire.AppendString(buf, "priority"), string(b.Priority))
	if b.Key != "" {
		buf = wire.AppendString(wire.AppendString(buf, "key"), b.Key)
	}
	if !b.ExpiresAt.IsZero() {
		buf = wire.AppendTime(wire.AppendString(buf, "expires_at"), b.ExpiresAt)
	}
	buf = wire.AppendTime(wire.AppendString(buf, "created_at"), b.CreatedAt)
	if b.ReplayOf != 0 {
		buf = wire.AppendUint64(wire.AppendString(buf, "replay_of"), b.ReplayOf)
	}
	if !b.RunAt.IsZero() {
		buf = wire.AppendTime(wire.AppendString(buf, "run_at"), b.RunAt)
	}
	return buf
}

// ReadMsgpack reads a batch from the start of buf and returns the bytes after it.
func (b *Batch) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *b = Batch{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "id":
			b.ID, buf, err = wire.ReadUnsigned[uint64](buf)
		case "domain":
			b.Domain, buf, err = wire.ReadString(buf)
		case "label":
			b.Label, buf, err = wire.ReadString(buf)
		case "submitter":
			b.Submitter, buf, err = wire.ReadString(buf)
		case "functions":
			b.Functions, buf, err = wire.ReadSlice[Function](buf)
		case "subroutine":
			buf, err = b.Subroutine.ReadMsgpack(buf)
		case "priority":
			b.Priority, buf, err = wire.ReadEnum(buf, priorities)
		case "key":
			b.Key, buf, err = wire.ReadString(buf)
		case "expires_at":
			b.ExpiresAt, buf, err = wire.ReadTime(buf)
		case "created_at":
			b.CreatedAt, buf, err = wire.ReadTime(buf)
		case "replay_of":
			b.ReplayOf, buf, err = wire.ReadUnsigned[uint64](buf)
		case "run_at":
			b.RunAt, buf, err = wire.ReadTime(buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (f Function) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &f) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (f *Function) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, f) }

// AppendMsgpack appends the function's msgpack encoding to buf.
func (f *Function) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 1+wire.Count(len(f.Payload) > 0, f.Retry != nil, f.Confirm != nil, f.Sender, f.Inclusion != nil))
	buf = wire.AppendString(wire.AppendString(buf, "type"), f.Type)
	if len(f.Payload) > 0 {
		buf = append(wire.AppendString(buf, "payload"), f.Payload...)
	}
	if f.Retry != nil {
		buf = f.Retry.AppendMsgpack(wire.AppendString(buf, "retry"))
	}
	if f.Confirm != nil {
		buf = f.Confirm.AppendMsgpack(wire.AppendString(buf, "confirm"))
	}
	if f.Sender {
		buf = wire.AppendBool(wire.AppendString(buf, "sender"), true)
	}
	if f.Inclusion != nil {
		buf = f.Inclusion.AppendMsgpack(wire.AppendString(buf, "inclusion"))
	}
	return buf
}

// ReadMsgpack reads a function from the start of buf and returns the bytes after it.
func (f *Function) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *f = Function{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "type":
			f.Type, buf, err = wire.ReadString(buf)
		case "payload":
			f.Payload, buf, err = wire.ReadPayload(buf)
		case "retry":
			f.Retry, buf, err = wire.ReadPtr(f.Retry, buf)
		case "confirm":
			f.Confirm, buf, err = wire.ReadPtr(f.Confirm, buf)
		case "sender":
			f.Sender, buf, err = wire.ReadBool(buf)
		case "inclusion":
			f.Inclusion, buf, err = wire.ReadPtr(f.Inclusion, buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// AppendMsgpack appends the subroutine's msgpack encoding to buf.
func (s *Subroutine) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 1+wire.Count(s.Retry != nil))
	buf = wire.AppendString(wire.AppendString(buf, "mode"), string(s.Mode))
	if s.Retry != nil {
		buf = s.Retry.AppendMsgpack(wire.AppendString(buf, "retry"))
	}
	return buf
}

// ReadMsgpack reads a subroutine from the start of buf and returns the bytes after it.
func (s *Subroutine) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *s = Subroutine{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "mode":
			s.Mode, buf, err = wire.ReadEnum(buf, modes)
		case "retry":
			s.Retry, buf, err = wire.ReadPtr(s.Retry, buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// AppendMsgpack appends the retry logic's msgpack encoding to buf.
func (r *RetryLogic) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 2+wire.Count(r.Jitter != 0, len(r.NonRetryable) > 0, len(r.RetryOn) > 0))
	buf = wire.AppendString(buf, "times")
	if r.Times == Forever {
		buf = wire.AppendText(buf, "indefinitely")
	} else {
		buf = wire.AppendText(buf, strconv.Itoa(int(r.Times)))
	}
	buf = r.Backoff.AppendMsgpack(wire.AppendString(buf, "backoff"))
	if r.Jitter != 0 {
		buf = appendDuration(wire.AppendString(buf, "jitter"), r.Jitter)
	}
	if len(r.NonRetryable) > 0 {
		buf = wire.AppendStrings(wire.AppendString(buf, "non_retryable"), r.NonRetryable)
	}
	if len(r.RetryOn) > 0 {
		buf = wire.AppendStrings(wire.AppendString(buf, "retry_on"), r.RetryOn)
	}
	return buf
}

// ReadMsgpack reads a retry logic from the start of buf and returns the bytes after it.
func (r *RetryLogic) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *r = RetryLogic{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "times":
			var text []byte
			var isNil bool
			if text, isNil, buf, err = wire.ReadText(buf); err == nil {
				if isNil {
					r.Times = 0
				} else {
					err = r.Times.UnmarshalText(text)
				}
			}
		case "backoff":
			buf, err = r.Backoff.ReadMsgpack(buf)
		case "jitter":
			buf, err = readDuration(&r.Jitter, buf)
		case "non_retryable":
			r.NonRetryable, buf, err = wire.ReadStrings(buf)
		case "retry_on":
			r.RetryOn, buf, err = wire.ReadStrings(buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// AppendMsgpack appends the backoff's msgpack encoding to buf.
func (bo *Backoff) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 2+wire.Count(bo.Increment != 0, bo.Multiplier != 0, bo.Max != 0))
	buf = wire.AppendString(wire.AppendString(buf, "kind"), string(bo.Kind))
	buf = appendDuration(wire.AppendString(buf, "initial"), bo.Initial)
	if bo.Increment != 0 {
		buf = appendDuration(wire.AppendString(buf, "increment"), bo.Increment)
	}
	if bo.Multiplier != 0 {
		buf = wire.AppendFloat64(wire.AppendString(buf, "multiplier"), bo.Multiplier)
	}
	if bo.Max != 0 {
		buf = appendDuration(wire.AppendString(buf, "max"), bo.Max)
	}
	return buf
}

// ReadMsgpack reads a backoff from the start of buf and returns the bytes after it.
func (bo *Backoff) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *bo = Backoff{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "kind":
			bo.Kind, buf, err = wire.ReadEnum(buf, backoffKinds)
		case "initial":
			buf, err = readDuration(&bo.Initial, buf)
		case "increment":
			buf, err = readDuration(&bo.Increment, buf)
		case "multiplier":
			bo.Multiplier, buf, err = wire.ReadFloat64(buf)
		case "max":
			buf, err = readDuration(&bo.Max, buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// AppendMsgpack appends the confirmation's msgpack encoding to buf.
func (c *Confirmation) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 2+wire.Count(len(c.By) > 0))
	buf = wire.AppendString(wire.AppendString(buf, "expect"), c.Expect)
	buf = appendDuration(wire.AppendString(buf, "timeout"), c.Timeout)
	if len(c.By) > 0 {
		buf = wire.AppendStrings(wire.AppendString(buf, "by"), c.By)
	}
	return buf
}

// ReadMsgpack reads a confirmation from the start of buf and returns the bytes after it.
func (c *Confirmation) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *c = Confirmation{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "expect":
			c.Expect, buf, err = wire.ReadString(buf)
		case "timeout":
			buf, err = readDuration(&c.Timeout, buf)
		case "by":
			c.By, buf, err = wire.ReadStrings(buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// AppendMsgpack appends the inclusion's msgpack encoding to buf.
func (i *Inclusion) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 1+wire.Count(i.PollEvery != 0, len(i.By) > 0))
	if i.PollEvery != 0 {
		buf = appendDuration(wire.AppendString(buf, "poll_every"), i.PollEvery)
	}
	buf = appendDuration(wire.AppendString(buf, "max_wait"), i.MaxWait)
	if len(i.By) > 0 {
		buf = wire.AppendStrings(wire.AppendString(buf, "by"), i.By)
	}
	return buf
}

// ReadMsgpack reads an inclusion from the start of buf and returns the bytes after it.
func (i *Inclusion) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *i = Inclusion{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "poll_every":
			buf, err = readDuration(&i.PollEvery, buf)
		case "max_wait":
			buf, err = readDuration(&i.MaxWait, buf)
		case "by":
			i.By, buf, err = wire.ReadStrings(buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (o Outcome) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &o) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (o *Outcome) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, o) }

// AppendMsgpack appends the outcome's msgpack encoding to buf.
func (o *Outcome) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 2+wire.Count(o.Reason != ""))
	buf = wire.AppendString(wire.AppendString(buf, "status"), string(o.Status))
	buf = wire.AppendInt(wire.AppendString(buf, "executed"), int64(o.Executed))
	if o.Reason != "" {
		buf = wire.AppendString(wire.AppendString(buf, "reason"), o.Reason)
	}
	return buf
}

// ReadMsgpack reads an outcome from the start of buf and returns the bytes after it.
func (o *Outcome) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *o = Outcome{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "status":
			o.Status, buf, err = wire.ReadEnum(buf, statuses)
		case "executed":
			o.Executed, buf, err = wire.ReadSigned[int](buf)
		case "reason":
			o.Reason, buf, err = wire.ReadString(buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (o Output) EncodeMsgpack(enc *msgpack.Encoder) error { return wire.Encode(enc, &o) }

// DecodeMsgpack implements msgpack.CustomDecoder.
func (o *Output) DecodeMsgpack(dec *msgpack.Decoder) error { return wire.Decode(dec, o) }

// AppendMsgpack appends the output's msgpack encoding to buf.
func (o *Output) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 2+wire.Count(len(o.Data) > 0, o.Ref != ""))
	buf = wire.AppendInt(wire.AppendString(buf, "index"), int64(o.Index))
	buf = wire.AppendString(wire.AppendString(buf, "type"), o.Type)
	if len(o.Data) > 0 {
		buf = append(wire.AppendString(buf, "data"), o.Data...)
	}
	if o.Ref != "" {
		buf = wire.AppendString(wire.AppendString(buf, "ref"), o.Ref)
	}
	return buf
}

// ReadMsgpack reads an output from the start of buf and returns the bytes after it.
func (o *Output) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *o = Output{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "index":
			o.Index, buf, err = wire.ReadSigned[int](buf)
		case "type":
			o.Type, buf, err = wire.ReadString(buf)
		case "data":
			o.Data, buf, err = wire.ReadPayload(buf)
		case "ref":
			o.Ref, buf, err = wire.ReadString(buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// AppendMsgpack appends the failure's msgpack encoding to buf.
func (f *Failure) AppendMsgpack(buf []byte) []byte {
	buf = wire.AppendMapHeader(buf, 6+wire.Count(f.Key != ""))
	buf = wire.AppendUint64(wire.AppendString(buf, "id"), f.BatchID)
	buf = wire.AppendInt(wire.AppendString(buf, "index"), int64(f.Index))
	if f.Key != "" {
		buf = wire.AppendString(wire.AppendString(buf, "key"), f.Key)
	}
	buf = wire.AppendTime(wire.AppendString(buf, "created_at"), f.CreatedAt)
	buf = wire.AppendInt(wire.AppendString(buf, "failures"), int64(f.Failures))
	buf = wire.AppendString(wire.AppendString(buf, "last_error"), f.LastError)
	return wire.AppendBool(wire.AppendString(buf, "exhausted"), f.Exhausted)
}

// ReadMsgpack reads a failure from the start of buf and returns the bytes after it.
func (f *Failure) ReadMsgpack(buf []byte) ([]byte, error) {
	return wire.ReadMap(buf, func() { *f = Failure{} }, func(k, buf []byte) (_ []byte, err error) {
		switch string(k) {
		case "id":
			f.BatchID, buf, err = wire.ReadUnsigned[uint64](buf)
		case "index":
			f.Index, buf, err = wire.ReadSigned[int](buf)
		case "key":
			f.Key, buf, err = wire.ReadString(buf)
		case "created_at":
			f.CreatedAt, buf, err = wire.ReadTime(buf)
		case "failures":
			f.Failures, buf, err = wire.ReadSigned[int](buf)
		case "last_error":
			f.LastError, buf, err = wire.ReadString(buf)
		case "exhausted":
			f.Exhausted, buf, err = wire.ReadBool(buf)
		default:
			buf, err = wire.Skip(buf)
		}
		return buf, err
	})
}

// appendDuration appends d as its text, as msgpack/v5 writes a Duration
// through its MarshalText.
func appendDuration(buf []byte, d Duration) []byte {
	return wire.AppendText(buf, time.Duration(d).String())
}

// readDuration reads a Duration written as text; nil reads as zero.
func readDuration(d *Duration, buf []byte) ([]byte, error) {
	text, isNil, buf, err := wire.ReadText(buf)
	if err != nil {
		return buf, err
	}
	if isNil {
		*d = 0
		return buf, nil
	}
	return buf, d.UnmarshalText(text)
}

// The values of the enumerations, which the readers return without
// allocating a string.
var (
	priorities   = []Priority{High, Med}
	modes        = []Mode{Atomic, NonAtomic}
	backoffKinds = []BackoffKind{Fixed, Linear, Exponential}
	statuses     = []Status{InProcess, Executed, Rejected, PartiallyExecuted, RemovedByOwner, Expired}
)
