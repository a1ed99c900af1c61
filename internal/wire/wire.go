// Package wire holds the msgpack primitives of the hand-written record
// codecs (pipeline and streams): appending values to a byte slice exactly
// as github.com/vmihailenco/msgpack/v5 encodes them with its default
// options, and reading them back from a byte slice with the same leniency
// as its decoder, without reflection. Every Read function returns the value,
// the bytes after it, and an error wrapping ErrMalformed on bad input; none
// panics.
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrMalformed is wrapped by every error a Read function returns.
var ErrMalformed = errors.New("wire: malformed msgpack")

// errShort is the error of input that ends inside a value.
var errShort = fmt.Errorf("%w: unexpected end of data", ErrMalformed)

// maxDepth bounds the nesting Skip follows, so hostile input cannot
// exhaust the stack.
const maxDepth = 1000

// The msgpack codes the codecs use.
const (
	codeNil      = 0xc0
	codeFalse    = 0xc2
	codeTrue     = 0xc3
	codeBin8     = 0xc4
	codeBin16    = 0xc5
	codeBin32    = 0xc6
	codeExt8     = 0xc7
	codeExt16    = 0xc8
	codeExt32    = 0xc9
	codeFloat    = 0xca
	codeDouble   = 0xcb
	codeUint8    = 0xcc
	codeUint16   = 0xcd
	codeUint32   = 0xce
	codeUint64   = 0xcf
	codeInt8     = 0xd0
	codeInt16    = 0xd1
	codeInt32    = 0xd2
	codeInt64    = 0xd3
	codeFixExt1  = 0xd4
	codeFixExt2  = 0xd5
	codeFixExt4  = 0xd6
	codeFixExt8  = 0xd7
	codeFixExt16 = 0xd8
	codeStr8     = 0xd9
	codeStr16    = 0xda
	codeStr32    = 0xdb
	codeArray16  = 0xdc
	codeArray32  = 0xdd
	codeMap16    = 0xde
	codeMap32    = 0xdf
)

// timeExtID is the extension type msgpack/v5 writes times under.
const timeExtID = -1

func unexpected(c byte, what string) error {
	return fmt.Errorf("%w: code %#x where %s was expected", ErrMalformed, c, what)
}

// AppendNil appends nil.
func AppendNil(b []byte) []byte { return append(b, codeNil) }

// AppendBool appends v.
func AppendBool(b []byte, v bool) []byte {
	if v {
		return append(b, codeTrue)
	}
	return append(b, codeFalse)
}

// AppendMapHeader appends the header of a map of n entries.
func AppendMapHeader(b []byte, n int) []byte { return appendHeader(b, n, 0x80, codeMap16, codeMap32) }

// AppendArrayHeader appends the header of an array of n elements.
func AppendArrayHeader(b []byte, n int) []byte {
	return appendHeader(b, n, 0x90, codeArray16, codeArray32)
}

// appendHeader appends the header of a map or an array of n: fix is its
// fixed form's first code, code16 and code32 its longer forms (readHeader
// reads it back).
func appendHeader(b []byte, n int, fix, code16, code32 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return append(b, code16, byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint32(append(b, code32), uint32(n))
}

// AppendString appends s as a msgpack string.
func AppendString(b []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, codeStr8, byte(n))
	case n <= math.MaxUint16:
		b = append(b, codeStr16, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, codeStr32), uint32(n))
	}
	return append(b, s...)
}

// AppendBytes appends v as msgpack binary (nil for a nil slice), as an
// encoding.TextMarshaler's text is written.
func AppendBytes(b []byte, v []byte) []byte {
	if v == nil {
		return AppendNil(b)
	}
	return append(appendBinHeader(b, len(v)), v...)
}

// appendBinHeader appends the header of msgpack binary of n bytes.
func appendBinHeader(b []byte, n int) []byte {
	switch {
	case n < 256:
		return append(b, codeBin8, byte(n))
	case n <= math.MaxUint16:
		return append(b, codeBin16, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, codeBin32), uint32(n))
	}
}

// AppendUint appends n in the fewest bytes (an unsigned Go int kind
// without a fixed width, and every int once non-negative).
func AppendUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, codeUint8, byte(n))
	case n <= math.MaxUint16:
		return append(b, codeUint16, byte(n>>8), byte(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, codeUint32), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, codeUint64), n)
}

// AppendInt appends n in the fewest bytes, as msgpack/v5 writes a Go int.
func AppendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return AppendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, codeInt8, byte(n))
	case n >= math.MinInt16:
		return append(b, codeInt16, byte(n>>8), byte(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, codeInt32), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, codeInt64), uint64(n))
}

// AppendUint8 appends n in two bytes, as msgpack/v5 writes a uint8.
func AppendUint8(b []byte, n uint8) []byte { return append(b, codeUint8, n) }

// AppendUint32 appends n in five bytes, as msgpack/v5 writes a uint32.
func AppendUint32(b []byte, n uint32) []byte {
	return binary.BigEndian.AppendUint32(append(b, codeUint32), n)
}

// AppendUint64 appends n in nine bytes, as msgpack/v5 writes a uint64.
func AppendUint64(b []byte, n uint64) []byte {
	return binary.BigEndian.AppendUint64(append(b, codeUint64), n)
}

// AppendFloat64 appends f as a msgpack double.
func AppendFloat64(b []byte, f float64) []byte {
	return binary.BigEndian.AppendUint64(append(b, codeDouble), math.Float64bits(f))
}

// AppendTime appends t as msgpack/v5's time extension.
func AppendTime(b []byte, t time.Time) []byte {
	secs := uint64(t.Unix())
	if secs>>34 == 0 {
		data := uint64(t.Nanosecond())<<34 | secs
		if data&0xffffffff00000000 == 0 {
			return binary.BigEndian.AppendUint32(append(b, codeFixExt4, 0xff), uint32(data))
		}
		return binary.BigEndian.AppendUint64(append(b, codeFixExt8, 0xff), data)
	}
	b = binary.BigEndian.AppendUint32(append(b, codeExt8, 12, 0xff), uint32(t.Nanosecond()))
	return binary.BigEndian.AppendUint64(b, secs)
}

// ReadMapHeader reads a map header: its entry count, or -1 for nil.
func ReadMapHeader(b []byte) (int, []byte, error) {
	return readHeader(b, 0x80, codeMap16, codeMap32, "a map")
}

// ReadArrayHeader reads an array header: its length, or -1 for nil.
func ReadArrayHeader(b []byte) (int, []byte, error) {
	return readHeader(b, 0x90, codeArray16, codeArray32, "an array")
}

// readHeader reads the header of a map or an array: fix is its fixed form's
// first code (a count of up to 15 in its low bits), code16 and code32 its
// longer forms; nil reads as -1.
func readHeader(b []byte, fix, code16, code32 byte, what string) (int, []byte, error) {
	if len(b) == 0 {
		return 0, b, errShort
	}
	c := b[0]
	switch {
	case c == codeNil:
		return -1, b[1:], nil
	case c >= fix && c <= fix|0x0f:
		return int(c & 0x0f), b[1:], nil
	case c == code16:
		if len(b) < 3 {
			return 0, b, errShort
		}
		return int(binary.BigEndian.Uint16(b[1:])), b[3:], nil
	case c == code32:
		if len(b) < 5 {
			return 0, b, errShort
		}
		return int(binary.BigEndian.Uint32(b[1:])), b[5:], nil
	}
	return 0, b, unexpected(c, what)
}

// ReadStringBytes reads a string or binary value without copying it: the
// result aliases b. Nil reads as nil.
func ReadStringBytes(b []byte) ([]byte, []byte, error) {
	if len(b) == 0 {
		return nil, b, errShort
	}
	c := b[0]
	var n, h int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		n, h = int(c&0x1f), 1
	case c == codeNil:
		return nil, b[1:], nil
	case c == codeStr8 || c == codeBin8:
		if len(b) < 2 {
			return nil, b, errShort
		}
		n, h = int(b[1]), 2
	case c == codeStr16 || c == codeBin16:
		if len(b) < 3 {
			return nil, b, errShort
		}
		n, h = int(binary.BigEndian.Uint16(b[1:])), 3
	case c == codeStr32 || c == codeBin32:
		if len(b) < 5 {
			return nil, b, errShort
		}
		n, h = int(binary.BigEndian.Uint32(b[1:])), 5
	default:
		return nil, b, unexpected(c, "a string")
	}
	if len(b)-h < n {
		return nil, b, errShort
	}
	return b[h : h+n], b[h+n:], nil
}

// ReadString reads a string or binary value into a new string; nil reads
// as "".
func ReadString(b []byte) (string, []byte, error) {
	s, rest, err := ReadStringBytes(b)
	if err != nil || len(s) == 0 {
		return "", rest, err
	}
	return string(s), rest, nil
}

// ReadStrings reads an array of strings: nil for nil, empty (not nil) for
// an empty array, as msgpack/v5 decodes a []string.
func ReadStrings(b []byte) ([]string, []byte, error) {
	n, b, err := ReadArrayHeader(b)
	if err != nil || n < 0 {
		return nil, b, err
	}
	out := make([]string, 0, min(n, len(b)))
	for range n {
		var s string
		if s, b, err = ReadString(b); err != nil {
			return nil, b, err
		}
		out = append(out, s)
	}
	return out, b, nil
}

// AppendStrings appends ss as an array of strings (nil for a nil slice).
func AppendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return AppendNil(b)
	}
	b = AppendArrayHeader(b, len(ss))
	for _, s := range ss {
		b = AppendString(b, s)
	}
	return b
}

// ReadInt reads any integer (nil reads as 0), as msgpack/v5 decodes a
// signed Go int.
func ReadInt(b []byte) (int64, []byte, error) {
	if len(b) == 0 {
		return 0, b, errShort
	}
	c := b[0]
	if c <= 0x7f || c >= 0xe0 {
		return int64(int8(c)), b[1:], nil
	}
	if c == codeNil {
		return 0, b[1:], nil
	}
	n, rest, err := readFixed(b, c, "an integer")
	if err != nil {
		return 0, b, err
	}
	switch c {
	case codeInt8:
		return int64(int8(n)), rest, nil
	case codeInt16:
		return int64(int16(n)), rest, nil
	case codeInt32:
		return int64(int32(n)), rest, nil
	}
	return int64(n), rest, nil
}

// ReadUint reads any integer (nil reads as 0), as msgpack/v5 decodes an
// unsigned Go int: a negative number wraps around (ReadInt's bits).
func ReadUint(b []byte) (uint64, []byte, error) {
	n, rest, err := ReadInt(b)
	return uint64(n), rest, err
}

// readFixed reads the big-endian payload of a fixed-width integer code.
func readFixed(b []byte, c byte, what string) (uint64, []byte, error) {
	var w int
	switch c {
	case codeUint8, codeInt8:
		w = 1
	case codeUint16, codeInt16:
		w = 2
	case codeUint32, codeInt32:
		w = 4
	case codeUint64, codeInt64:
		w = 8
	default:
		return 0, b, unexpected(c, what)
	}
	if len(b) < 1+w {
		return 0, b, errShort
	}
	p := b[1 : 1+w]
	var n uint64
	switch w {
	case 1:
		n = uint64(p[0])
	case 2:
		n = uint64(binary.BigEndian.Uint16(p))
	case 4:
		n = uint64(binary.BigEndian.Uint32(p))
	default:
		n = binary.BigEndian.Uint64(p)
	}
	return n, b[1+w:], nil
}

// ReadBool reads a boolean; nil reads as false.
func ReadBool(b []byte) (bool, []byte, error) {
	if len(b) == 0 {
		return false, b, errShort
	}
	switch b[0] {
	case codeTrue:
		return true, b[1:], nil
	case codeFalse, codeNil:
		return false, b[1:], nil
	}
	return false, b, unexpected(b[0], "a boolean")
}

// ReadFloat64 reads a float, a double or an integer (nil reads as 0).
func ReadFloat64(b []byte) (float64, []byte, error) {
	if len(b) == 0 {
		return 0, b, errShort
	}
	switch b[0] {
	case codeFloat:
		if len(b) < 5 {
			return 0, b, errShort
		}
		return float64(math.Float32frombits(binary.BigEndian.Uint32(b[1:]))), b[5:], nil
	case codeDouble:
		if len(b) < 9 {
			return 0, b, errShort
		}
		return math.Float64frombits(binary.BigEndian.Uint64(b[1:])), b[9:], nil
	}
	n, rest, err := ReadInt(b)
	return float64(n), rest, err
}

// ReadTime reads msgpack/v5's time extension, in time.Local as msgpack/v5
// decodes it (the zero time in UTC); nil reads as the zero time.
func ReadTime(b []byte) (time.Time, []byte, error) {
	if len(b) == 0 {
		return time.Time{}, b, errShort
	}
	if b[0] == codeNil {
		return time.Time{}, b[1:], nil
	}
	id, data, rest, err := readExt(b)
	if err != nil {
		return time.Time{}, b, err
	}
	if id != timeExtID {
		return time.Time{}, b, fmt.Errorf("%w: extension type %d where a time (%d) was expected", ErrMalformed, id, timeExtID)
	}
	var t time.Time
	switch len(data) {
	case 4:
		t = time.Unix(int64(binary.BigEndian.Uint32(data)), 0)
	case 8:
		v := binary.BigEndian.Uint64(data)
		t = time.Unix(int64(v&0x00000003ffffffff), int64(v>>34))
	case 12:
		t = time.Unix(int64(binary.BigEndian.Uint64(data[4:])), int64(binary.BigEndian.Uint32(data)))
	default:
		return time.Time{}, b, fmt.Errorf("%w: time extension of %d bytes (expected 4, 8 or 12)", ErrMalformed, len(data))
	}
	if t.IsZero() {
		t = t.UTC()
	}
	return t, rest, nil
}

// readExt reads an extension: its type and its data.
func readExt(b []byte) (int8, []byte, []byte, error) {
	c := b[0]
	var n, h int
	switch c {
	case codeFixExt1:
		n, h = 1, 1
	case codeFixExt2:
		n, h = 2, 1
	case codeFixExt4:
		n, h = 4, 1
	case codeFixExt8:
		n, h = 8, 1
	case codeFixExt16:
		n, h = 16, 1
	case codeExt8:
		if len(b) < 2 {
			return 0, nil, b, errShort
		}
		n, h = int(b[1]), 2
	case codeExt16:
		if len(b) < 3 {
			return 0, nil, b, errShort
		}
		n, h = int(binary.BigEndian.Uint16(b[1:])), 3
	case codeExt32:
		if len(b) < 5 {
			return 0, nil, b, errShort
		}
		n, h = int(binary.BigEndian.Uint32(b[1:])), 5
	default:
		return 0, nil, b, unexpected(c, "an extension")
	}
	if len(b)-h-1 < n {
		return 0, nil, b, errShort
	}
	return int8(b[h]), b[h+1 : h+1+n], b[h+1+n:], nil
}

// ReadRaw returns the next value whole (aliasing b) and the bytes after it.
func ReadRaw(b []byte) ([]byte, []byte, error) {
	rest, err := Skip(b)
	if err != nil {
		return nil, b, err
	}
	return b[:len(b)-len(rest)], rest, nil
}

// Skip returns the bytes after the next value.
func Skip(b []byte) ([]byte, error) { return skip(b, 0) }

func skip(b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return b, fmt.Errorf("%w: values nested deeper than %d", ErrMalformed, maxDepth)
	}
	if len(b) == 0 {
		return b, errShort
	}
	c := b[0]
	var entries int // values that follow the header
	switch {
	case c <= 0x7f || c >= 0xe0 || c == codeNil || c == codeFalse || c == codeTrue:
		return b[1:], nil
	case c >= 0x80 && c <= 0x8f, c == codeMap16, c == codeMap32:
		n, rest, err := ReadMapHeader(b)
		if err != nil {
			return b, err
		}
		b, entries = rest, 2*n
	case c >= 0x90 && c <= 0x9f, c == codeArray16, c == codeArray32:
		n, rest, err := ReadArrayHeader(b)
		if err != nil {
			return b, err
		}
		b, entries = rest, n
	case c >= 0xa0 && c <= 0xbf, c == codeStr8, c == codeStr16, c == codeStr32, c == codeBin8, c == codeBin16, c == codeBin32:
		_, rest, err := ReadStringBytes(b)
		return rest, err
	case c == codeFloat:
		return advance(b, 5)
	case c == codeDouble:
		return advance(b, 9)
	case c >= codeUint8 && c <= codeInt64:
		_, rest, err := readFixed(b, c, "an integer")
		return rest, err
	case c == codeFixExt1, c == codeFixExt2, c == codeFixExt4, c == codeFixExt8, c == codeFixExt16,
		c == codeExt8, c == codeExt16, c == codeExt32:
		_, _, rest, err := readExt(b)
		return rest, err
	default:
		return b, unexpected(c, "a value")
	}
	for range entries {
		var err error
		if b, err = skip(b, depth+1); err != nil {
			return b, err
		}
	}
	return b, nil
}

func advance(b []byte, n int) ([]byte, error) {
	if len(b) < n {
		return b, errShort
	}
	return b[n:], nil
}

// AppendText appends text as msgpack binary, as msgpack/v5 writes what an
// encoding.TextMarshaler returns.
func AppendText(b []byte, text string) []byte {
	return append(appendBinHeader(b, len(text)), text...)
}

// ReadSigned reads any integer into a signed type (see ReadInt).
func ReadSigned[T ~int | ~int64 | ~int32](b []byte) (T, []byte, error) {
	n, rest, err := ReadInt(b)
	return T(n), rest, err
}

// ReadUnsigned reads any integer into an unsigned type (see ReadUint); a
// wider value is truncated, as msgpack/v5 truncates it.
func ReadUnsigned[T ~uint8 | ~uint32 | ~uint64](b []byte) (T, []byte, error) {
	n, rest, err := ReadUint(b)
	return T(n), rest, err
}

// ReadStringAs reads a string into a string type (see ReadString).
func ReadStringAs[T ~string](b []byte) (T, []byte, error) {
	s, rest, err := ReadString(b)
	return T(s), rest, err
}

// ReadPayload reads the next value whole, copied: nil for nil, as
// pipeline.Payload keeps a raw value.
func ReadPayload(b []byte) ([]byte, []byte, error) {
	raw, rest, err := ReadRaw(b)
	if err != nil || (len(raw) == 1 && raw[0] == codeNil) {
		return nil, rest, err
	}
	return append([]byte(nil), raw...), rest, nil
}

// ReadText reads a text value (string or binary) without copying it, as
// msgpack/v5 decodes an encoding.TextUnmarshaler; isNil reports a nil,
// which leaves the value zero.
func ReadText(b []byte) (text []byte, isNil bool, rest []byte, err error) {
	if len(b) > 0 && b[0] == codeNil {
		return nil, true, b[1:], nil
	}
	text, rest, err = ReadStringBytes(b)
	return text, false, rest, err
}

// ReadMap reads a record written as a msgpack map from the start of b and
// returns the bytes after it. A nil map (or one whose header cannot be
// read) calls reset. Each entry's key goes to field with the bytes at its
// value: field reads the value (Skip for a key it does not know) and
// returns the bytes after it; an error it returns is wrapped with the key.
func ReadMap(b []byte, reset func(), field func(key, b []byte) ([]byte, error)) ([]byte, error) {
	n, b, err := ReadMapHeader(b)
	if err != nil || n < 0 {
		reset()
		return b, err
	}
	for range n {
		var k []byte
		if k, b, err = ReadStringBytes(b); err != nil {
			return b, err
		}
		if b, err = field(k, b); err != nil {
			return b, Field(k, err)
		}
	}
	return b, nil
}

// Field wraps err with the key of the field it occurred in.
func Field(key []byte, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("field %q: %w", key, err)
}

// Appender is a record that appends its own msgpack encoding.
type Appender interface {
	AppendMsgpack(b []byte) []byte
}

// Reader is a record that reads itself from the start of a byte slice and
// returns the bytes after it.
type Reader interface {
	ReadMsgpack(b []byte) ([]byte, error)
}

var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// Encode writes a's encoding to enc: the CustomEncoder of a record with a
// hand-written codec.
func Encode(enc *msgpack.Encoder, a Appender) error {
	p := scratch.Get().(*[]byte)
	b := a.AppendMsgpack((*p)[:0])
	_, err := enc.Writer().Write(b)
	if cap(b) <= 64<<10 {
		*p = b
		scratch.Put(p)
	}
	return err
}

// WithEncoding calls use with a's encoding in a pooled scratch buffer,
// which use must not keep: for a hot path whose bytes are copied away (a
// publish copies them).
func WithEncoding(a Appender, use func([]byte)) {
	p := scratch.Get().(*[]byte)
	b := a.AppendMsgpack((*p)[:0])
	use(b)
	if cap(b) <= 64<<10 {
		*p = b
		scratch.Put(p)
	}
}

// Marshal returns a's encoding in a slice of its own.
func Marshal(a Appender) (out []byte) {
	WithEncoding(a, func(b []byte) { out = append(make([]byte, 0, len(b)), b...) })
	return out
}

// Decode reads r from dec: the CustomDecoder of a record with a
// hand-written codec. When dec reads from a SliceReader, r reads the
// bytes in place; otherwise it reads a copy of the value's bytes.
func Decode(dec *msgpack.Decoder, r Reader) error {
	if sr, ok := dec.Buffered().(*SliceReader); ok {
		rest := sr.b[sr.off:]
		after, err := r.ReadMsgpack(rest)
		sr.off += len(rest) - len(after)
		return err
	}
	raw, err := dec.DecodeRaw()
	if err != nil {
		return err
	}
	_, err = r.ReadMsgpack(raw)
	return err
}

// SliceReader reads a byte slice, as bytes.Reader does, and lets the
// hand-written codecs of the values a msgpack.Decoder meets on it read
// them in place (see Decode). Only a decoder that records nothing may read
// from it: one that is not inside DecodeRaw or a msgpack.Unmarshaler.
type SliceReader struct {
	b   []byte
	off int
}

// Reset makes r read b from its start.
func (r *SliceReader) Reset(b []byte) { r.b, r.off = b, 0 }

// Read implements io.Reader.
func (r *SliceReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

// ReadByte implements io.ByteReader.
func (r *SliceReader) ReadByte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// UnreadByte implements io.ByteScanner.
func (r *SliceReader) UnreadByte() error {
	if r.off == 0 {
		return errors.New("wire: UnreadByte at the start")
	}
	r.off--
	return nil
}

// Count returns how many of the conditions hold: the omitempty fields a
// map header counts.
func Count(conds ...bool) int {
	n := 0
	for _, c := range conds {
		if c {
			n++
		}
	}
	return n
}

// ReaderPtr is a pointer to a type with a hand-written reader.
type ReaderPtr[T any] interface {
	*T
	Reader
}

// ReadPtr reads an optional value: nil for nil, else the value, read into
// the existing one if p is set, as msgpack/v5 decodes a pointer.
func ReadPtr[T any, P ReaderPtr[T]](p P, b []byte) (P, []byte, error) {
	if len(b) > 0 && b[0] == codeNil {
		return nil, b[1:], nil
	}
	if p == nil {
		p = new(T)
	}
	b, err := p.ReadMsgpack(b)
	return p, b, err
}

// ReadSlice reads a list: nil for nil, empty (not nil) for an empty list,
// as msgpack/v5 decodes a slice.
func ReadSlice[T any, P ReaderPtr[T]](b []byte) ([]T, []byte, error) {
	n, b, err := ReadArrayHeader(b)
	if err != nil || n < 0 {
		return nil, b, err
	}
	// Every element takes at least one byte: a hostile length allocates
	// no more than the input holds.
	out := make([]T, 0, min(n, len(b)))
	for range n {
		var v T
		if b, err = P(&v).ReadMsgpack(b); err != nil {
			return nil, b, err
		}
		out = append(out, v)
	}
	return out, b, nil
}

// AppenderPtr is a pointer to a type with a hand-written writer.
type AppenderPtr[T any] interface {
	*T
	Appender
}

// AppendSlice appends a list (nil for a nil slice).
func AppendSlice[T any, P AppenderPtr[T]](b []byte, s []T) []byte {
	if s == nil {
		return AppendNil(b)
	}
	b = AppendArrayHeader(b, len(s))
	for i := range s {
		b = P(&s[i]).AppendMsgpack(b)
	}
	return b
}

// ReadEnum reads a string into a string type, returning the matching
// value of known without allocating, or a new string for any other.
func ReadEnum[T ~string](b []byte, known []T) (T, []byte, error) {
	s, rest, err := ReadStringBytes(b)
	if err != nil {
		return "", rest, err
	}
	for _, k := range known {
		if string(k) == string(s) {
			return k, rest, nil
		}
	}
	return T(s), rest, nil
}
