package records_test

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/vmihailenco/msgpack/v5"
)

// groupBody is the body of a group of callbacks cbs as a processor
// publishes it: each member stamped with its version, as its own encoding
// is (streams.CallbackGroupMsg joins those encodings into these very
// bytes; its test checks it).
func groupBody(t testing.TB, cbs []records.Callback) []byte {
	t.Helper()
	g := records.CallbackGroup{Callbacks: slices.Clone(cbs)}
	for i := range g.Callbacks {
		g.Callbacks[i].V = records.WireVersion
	}
	b, err := records.Encode(&g)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDecodeCallbacks reads both bodies a callback subject carries, and
// refuses what is not one.
func TestDecodeCallbacks(t *testing.T) {
	single := canonical(callbackFixture()).(records.Callback)
	singleData, err := records.Encode(&single)
	if err != nil {
		t.Fatal(err)
	}
	group := canonical(callbackGroupFixture()).(records.CallbackGroup)
	groupData := groupBody(t, group.Callbacks)
	empty, err := msgpack.Marshal(map[string]any{"v": records.WireVersion, "callbacks": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	oldMember, err := msgpack.Marshal(map[string]any{"v": records.WireVersion, "callbacks": []any{map[string]any{"v": records.WireVersion + 1, "id": 1}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		data      []byte
		want      []records.Callback
		wantGroup bool
		wantErr   error
	}{
		{name: "single", data: singleData, want: []records.Callback{single}},
		{name: "group", data: groupData, want: group.Callbacks, wantGroup: true},
		{name: "group without members", data: empty, wantGroup: true, wantErr: records.ErrDecode},
		{name: "member of another version", data: oldMember, wantGroup: true, wantErr: records.ErrVersion},
		{name: "truncated group", data: groupData[:len(groupData)/2], wantGroup: true, wantErr: records.ErrDecode},
		{name: "not msgpack", data: []byte("{}"), wantErr: records.ErrDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, isGroup, err := records.DecodeCallbacks(tt.data)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("DecodeCallbacks = %v, want an error matching %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if isGroup != tt.wantGroup {
				t.Errorf("group = %v, want %v", isGroup, tt.wantGroup)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecodeCallbacks =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// FuzzDecodeCallbacks: any body decodes to callbacks or to an error
// matching ErrDecode or ErrVersion, and what decodes re-encodes stably in
// its own form.
func FuzzDecodeCallbacks(f *testing.F) {
	single := callbackFixture()
	singleData, err := records.Encode(&single)
	if err != nil {
		f.Fatal(err)
	}
	g := callbackGroupFixture()
	groupData := groupBody(f, g.Callbacks)
	for _, seed := range [][]byte{singleData, groupData, groupData[:len(groupData)/2], groupData[:1], {}, append(append([]byte{}, groupData...), 0xc0)} {
		f.Add(seed)
	}
	encode := func(t testing.TB, cbs []records.Callback, group bool) []byte {
		if !group {
			b, err := records.Encode(&cbs[0])
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		return groupBody(t, cbs)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cbs, group, err := records.DecodeCallbacks(b)
		if err != nil {
			if !errors.Is(err, records.ErrDecode) && !errors.Is(err, records.ErrVersion) {
				t.Fatalf("DecodeCallbacks(%x) = %v, want an error matching ErrDecode or ErrVersion", b, err)
			}
			return
		}
		if len(cbs) == 0 || (!group && len(cbs) != 1) {
			t.Fatalf("DecodeCallbacks(%x) = %d callbacks (group %v)", b, len(cbs), group)
		}
		b1 := encode(t, cbs, group)
		cbs2, group2, err := records.DecodeCallbacks(b1)
		if err != nil || group2 != group {
			t.Fatalf("re-encoding %+v gave %x, which does not decode alike: %v", cbs, b1, err)
		}
		if b2 := encode(t, cbs2, group2); !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not stable across a round trip:\n%x\n%x", b1, b2)
		}
	})
}

// TestCallbackGroupFitsItsBound: a group of CallbackGroupMax callbacks of
// the usual size is far below max_payload.
func TestCallbackGroupFitsItsBound(t *testing.T) {
	cbs := make([]records.Callback, records.CallbackGroupMax)
	for i := range cbs {
		cbs[i] = benchNoopCallback()
		cbs[i].BatchID = uint64(i + 1)
		cbs[i].Processor = "proc-" + strconv.Itoa(i)
	}
	if b := groupBody(t, cbs); len(b) > 64<<10 {
		t.Fatalf("a group of %d callbacks takes %d bytes", len(cbs), len(b))
	}
}
