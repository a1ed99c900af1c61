package streams_test

import (
	"bytes"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/vmihailenco/msgpack/v5"
)

// TestDecodeCallbacks reads both bodies a callback subject carries, and
// refuses what is not one.
func TestDecodeCallbacks(t *testing.T) {
	single := canonical(callbackFixture()).(streams.Callback)
	singleData, err := streams.Encode(&single)
	if err != nil {
		t.Fatal(err)
	}
	group := canonical(callbackGroupFixture()).(streams.CallbackGroup)
	groupMsg, err := streams.CallbackGroupMsg("payments", group.Callbacks)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := msgpack.Marshal(map[string]any{"v": streams.WireVersion, "callbacks": []any{}})
	if err != nil {
		t.Fatal(err)
	}
	oldMember, err := msgpack.Marshal(map[string]any{"v": streams.WireVersion, "callbacks": []any{map[string]any{"v": streams.WireVersion + 1, "id": 1}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		data      []byte
		want      []streams.Callback
		wantGroup bool
		wantErr   error
	}{
		{name: "single", data: singleData, want: []streams.Callback{single}},
		{name: "group", data: groupMsg.Data, want: group.Callbacks, wantGroup: true},
		{name: "group without members", data: empty, wantGroup: true, wantErr: streams.ErrDecode},
		{name: "member of another version", data: oldMember, wantGroup: true, wantErr: streams.ErrVersion},
		{name: "truncated group", data: groupMsg.Data[:len(groupMsg.Data)/2], wantGroup: true, wantErr: streams.ErrDecode},
		{name: "not msgpack", data: []byte("{}"), wantErr: streams.ErrDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, isGroup, err := streams.DecodeCallbacks(tt.data)
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

// TestCallbackGroupMsgHeaders: `nats stream view` shows what a group holds.
func TestCallbackGroupMsgHeaders(t *testing.T) {
	cbs := []streams.Callback{{BatchID: 7, Domain: "payments"}, {BatchID: 9, Domain: "payments"}, {BatchID: 8, Domain: "payments"}}
	m, err := streams.CallbackGroupMsg("payments", cbs)
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]string{
		streams.HeaderKind: streams.KindCallbacks, streams.HeaderDomain: "payments", streams.HeaderCount: "3",
		streams.HeaderFirstBatchID: "7", streams.HeaderLastBatchID: "8",
	} {
		if got := m.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}
	// Joined from the members' own bodies, it is the group's encoding.
	enc, err := streams.Encode(&streams.CallbackGroup{Callbacks: cbs})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m.Data, enc) {
		t.Errorf("CallbackGroupMsg wrote\n%x\nEncode writes\n%x", m.Data, enc)
	}
	if m.Subject != streams.CallbackSubject("payments") {
		t.Errorf("subject %q", m.Subject)
	}
	if _, err := streams.CallbackGroupMsg("payments", nil); err == nil {
		t.Error("a group without members was built")
	}
	single, err := streams.CallbackMsg(&cbs[0])
	if err != nil {
		t.Fatal(err)
	}
	if n, one := streams.CallbacksIn(m.Header), streams.CallbacksIn(single.Header); n != 3 || one != 1 {
		t.Errorf("CallbacksIn: the group %d, want 3; a single callback %d, want 1", n, one)
	}
}

// FuzzDecodeCallbacks: any body decodes to callbacks or to an error
// matching ErrDecode or ErrVersion, and what decodes re-encodes stably in
// its own form.
func FuzzDecodeCallbacks(f *testing.F) {
	single := callbackFixture()
	singleData, err := streams.Encode(&single)
	if err != nil {
		f.Fatal(err)
	}
	g := callbackGroupFixture()
	groupMsg, err := streams.CallbackGroupMsg("payments", g.Callbacks)
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][]byte{singleData, groupMsg.Data, groupMsg.Data[:len(groupMsg.Data)/2], groupMsg.Data[:1], {}, append(append([]byte{}, groupMsg.Data...), 0xc0)} {
		f.Add(seed)
	}
	encode := func(t testing.TB, cbs []streams.Callback, group bool) []byte {
		if !group {
			b, err := streams.Encode(&cbs[0])
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		m, err := streams.CallbackGroupMsg("d", cbs)
		if err != nil {
			t.Fatal(err)
		}
		return m.Data
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cbs, group, err := streams.DecodeCallbacks(b)
		if err != nil {
			if !errors.Is(err, streams.ErrDecode) && !errors.Is(err, streams.ErrVersion) {
				t.Fatalf("DecodeCallbacks(%x) = %v, want an error matching ErrDecode or ErrVersion", b, err)
			}
			return
		}
		if len(cbs) == 0 || (!group && len(cbs) != 1) {
			t.Fatalf("DecodeCallbacks(%x) = %d callbacks (group %v)", b, len(cbs), group)
		}
		b1 := encode(t, cbs, group)
		cbs2, group2, err := streams.DecodeCallbacks(b1)
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
	cbs := make([]streams.Callback, streams.CallbackGroupMax)
	for i := range cbs {
		cbs[i] = benchNoopCallback()
		cbs[i].BatchID = uint64(i + 1)
		cbs[i].Processor = "proc-" + strconv.Itoa(i)
	}
	m, err := streams.CallbackGroupMsg("payments", cbs)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) > 64<<10 {
		t.Fatalf("a group of %d callbacks takes %d bytes", len(cbs), len(m.Data))
	}
}
