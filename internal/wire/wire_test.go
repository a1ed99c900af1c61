package wire_test

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// encodeWith returns what msgpack/v5's encoder writes with its default options.
func encodeWith(t *testing.T, f func(*msgpack.Encoder) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := f(msgpack.NewEncoder(&buf)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestIntegersMatchMsgpack(t *testing.T) {
	ints := []int64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxInt64,
		-1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64}
	for _, n := range ints {
		want := encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeInt(n) })
		if got := wire.AppendInt(nil, n); !bytes.Equal(got, want) {
			t.Errorf("AppendInt(%d) = %x, msgpack writes %x", n, got, want)
		}
		back, rest, err := wire.ReadInt(want)
		if err != nil || back != n || len(rest) != 0 {
			t.Errorf("ReadInt(%x) = %d, %x, %v; want %d", want, back, rest, err, n)
		}
		if n >= 0 {
			u, _, err := wire.ReadUint(want)
			if err != nil || u != uint64(n) {
				t.Errorf("ReadUint(%x) = %d, %v; want %d", want, u, err, n)
			}
		}
	}
	big := uint64(math.MaxUint64)
	want := encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeUint(big) })
	if got := wire.AppendUint(nil, big); !bytes.Equal(got, want) {
		t.Errorf("AppendUint(max) = %x, msgpack writes %x", got, want)
	}
	for _, c := range []struct {
		got, want []byte
	}{
		{wire.AppendUint8(nil, 1), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeUint8(1) })},
		{wire.AppendUint32(nil, 7), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeUint32(7) })},
		{wire.AppendUint64(nil, 7), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeUint64(7) })},
		{wire.AppendFloat64(nil, 1.5), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeFloat64(1.5) })},
		{wire.AppendBool(nil, true), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeBool(true) })},
		{wire.AppendNil(nil), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeNil() })},
	} {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("wrote %x, msgpack writes %x", c.got, c.want)
		}
	}
}

func TestLengthsMatchMsgpack(t *testing.T) {
	for _, n := range []int{0, 15, 16, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("x", n)
		if got, want := wire.AppendString(nil, s), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeString(s) }); !bytes.Equal(got, want) {
			t.Errorf("AppendString of %d bytes differs from msgpack's", n)
		}
		if got, want := wire.AppendText(nil, s), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeBytes([]byte(s)) }); !bytes.Equal(got, want) {
			t.Errorf("AppendText of %d bytes differs from msgpack's", n)
		}
		if got, want := wire.AppendMapHeader(nil, n), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeMapLen(n) }); !bytes.Equal(got, want) {
			t.Errorf("AppendMapHeader(%d) = %x, msgpack writes %x", n, got, want)
		}
		if got, want := wire.AppendArrayHeader(nil, n), encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeArrayLen(n) }); !bytes.Equal(got, want) {
			t.Errorf("AppendArrayHeader(%d) = %x, msgpack writes %x", n, got, want)
		}
		back, _, err := wire.ReadString(wire.AppendString(nil, s))
		if err != nil || back != s {
			t.Errorf("ReadString of %d bytes: %v", n, err)
		}
	}
}

func TestTimesMatchMsgpack(t *testing.T) {
	for _, tm := range []time.Time{
		time.Unix(1700000000, 0),                    // 4 bytes
		time.Unix(1700000000, 123456789),            // 8 bytes
		time.Date(2600, 1, 1, 0, 0, 0, 5, time.UTC), // 12 bytes
		time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), // negative seconds: 12 bytes
		{}, // zero
	} {
		want := encodeWith(t, func(e *msgpack.Encoder) error { return e.EncodeTime(tm) })
		if got := wire.AppendTime(nil, tm); !bytes.Equal(got, want) {
			t.Errorf("AppendTime(%v) = %x, msgpack writes %x", tm, got, want)
		}
		back, _, err := wire.ReadTime(want)
		var viaMsgpack time.Time
		if err2 := msgpack.Unmarshal(want, &viaMsgpack); err != nil || err2 != nil || !back.Equal(viaMsgpack) || back.Location() != viaMsgpack.Location() {
			t.Errorf("ReadTime(%x) = %v, %v; msgpack reads %v, %v", want, back, err, viaMsgpack, err2)
		}
	}
}

// TestSkip skips every kind of value msgpack writes, and rejects bytes
// that end early or nest too deep.
func TestSkip(t *testing.T) {
	values := []any{nil, true, 1, -1, 300, -300, 1 << 40, 1.5, float32(2.5), "s", strings.Repeat("y", 300), []byte{1, 2},
		[]any{1, "a", []any{nil}}, map[string]any{"k": map[string]any{"n": []any{}}}, time.Unix(1700000000, 1),
		make([]int, 70000)}
	for _, v := range values {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := wire.Skip(append(b, 0xc0))
		if err != nil || len(rest) != 1 {
			t.Errorf("Skip(%T) left %d bytes, %v; want the 1 after it", v, len(rest), err)
		}
		for n := range min(len(b), 64) {
			if _, err := wire.Skip(b[:n]); !errors.Is(err, wire.ErrMalformed) {
				t.Fatalf("Skip of the first %d bytes of %T = %v, want ErrMalformed", n, v, err)
			}
		}
	}
	deep := bytes.Repeat([]byte{0x91}, 100000)
	if _, err := wire.Skip(deep); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("Skip of 100000 nested arrays = %v, want ErrMalformed", err)
	}
	if _, err := wire.Skip([]byte{0xc1}); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("Skip of the reserved code = %v, want ErrMalformed", err)
	}
}
