// Package wiretest checks a hand-written msgpack codec against
// msgpack/v5's reflection codec, through a shadow type: a defined type
// with the record's fields and tags but none of its methods (type
// tokenReflect Token), which msgpack/v5 encodes by reflection. A shadow is
// reflective at its own level only, and uses the hand-written codecs of
// its fields' types; each of those is checked against its own shadow.
package wiretest

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/tickflow/tickflow/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// Codec is a pointer to a record with a hand-written codec.
type Codec[T any] interface {
	*T
	wire.Appender
	wire.Reader
}

// Check proves, for value v of record T and its shadow type S, that:
// the hand-written encoding is byte for byte msgpack/v5's; each codec
// decodes the other's bytes into the same value; both read the same value
// from the record re-encoded with its keys in another order, its integers
// in other widths and an unknown key added (forward compatibility); a
// record whose every field is nil reads as the zero value; and every
// truncation of the record is an error, never a panic.
func Check[T, S any, P Codec[T]](t *testing.T, v T) {
	t.Helper()
	want, err := msgpack.Marshal(shadow[S](v))
	if err != nil {
		t.Fatalf("msgpack/v5 encode of %T: %v", v, err)
	}
	got := P(&v).AppendMsgpack(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("%T encodes as\n%x\nmsgpack/v5 encodes it as\n%x", v, got, want)
	}
	same[T, S, P](t, "msgpack/v5's encoding", want)

	// Another order, other widths, an unknown key.
	var m map[string]any
	if err := msgpack.Unmarshal(want, &m); err != nil {
		t.Fatalf("decode %x as a map: %v", want, err)
	}
	m["zz_unknown"] = map[string]any{"list": []any{1, "two", nil, map[string]any{"deep": []byte{1}}}, "n": -70000}
	other, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	same[T, S, P](t, "a re-encoding with an unknown key", other)

	// Every field nil.
	for k := range m {
		m[k] = nil
	}
	nils, err := msgpack.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var zero, fromNils T
	if _, err := P(&fromNils).ReadMsgpack(nils); err != nil {
		t.Fatalf("decode of a record of nils %x: %v", nils, err)
	}
	if !reflect.DeepEqual(fromNils, zero) {
		t.Fatalf("a record of nils decodes as %+v, want the zero value", fromNils)
	}

	for n := range len(want) {
		var x T
		if _, err := P(&x).ReadMsgpack(want[:n]); err == nil {
			t.Fatalf("decode of the first %d of %d bytes %x succeeded", n, len(want), want[:n])
		}
	}
}

// same decodes b with both codecs and compares the values, and checks the
// hand-written decoder consumed b whole.
func same[T, S any, P Codec[T]](t *testing.T, what string, b []byte) {
	t.Helper()
	var byHand T
	rest, err := P(&byHand).ReadMsgpack(b)
	if err != nil {
		t.Fatalf("hand-written decode of %s %x: %v", what, b, err)
	}
	if len(rest) != 0 {
		t.Fatalf("hand-written decode of %s left %d bytes", what, len(rest))
	}
	var byReflection S
	if err := msgpack.Unmarshal(b, &byReflection); err != nil {
		t.Fatalf("msgpack/v5 decode of %s %x: %v", what, b, err)
	}
	if r := unshadow[T](byReflection); !reflect.DeepEqual(byHand, r) {
		t.Fatalf("decode of %s:\nhand-written %+v\n  msgpack/v5 %+v", what, byHand, r)
	}
	// And the hand-written encoding of what was read reads back the same
	// by reflection.
	again := P(&byHand).AppendMsgpack(nil)
	var back S
	if err := msgpack.Unmarshal(again, &back); err != nil {
		t.Fatalf("msgpack/v5 decode of the hand-written %x: %v", again, err)
	}
	if r := unshadow[T](back); !reflect.DeepEqual(byHand, r) {
		t.Fatalf("msgpack/v5 reads the hand-written encoding of %+v as %+v", byHand, r)
	}
}

func shadow[S, T any](v T) S {
	return reflect.ValueOf(v).Convert(reflect.TypeFor[S]()).Interface().(S)
}

func unshadow[T, S any](s S) T {
	return reflect.ValueOf(s).Convert(reflect.TypeFor[T]()).Interface().(T)
}
