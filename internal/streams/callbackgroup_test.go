package streams_test

import (
	"bytes"
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// TestCallbackGroupMsgHeaders: `nats stream view` shows what a group holds.
func TestCallbackGroupMsgHeaders(t *testing.T) {
	cbs := []records.Callback{{BatchID: 7, Domain: "payments"}, {BatchID: 9, Domain: "payments"}, {BatchID: 8, Domain: "payments"}}
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
	enc, err := records.Encode(&records.CallbackGroup{Callbacks: cbs})
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
