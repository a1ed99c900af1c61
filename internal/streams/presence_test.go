package streams_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestPresence: a record is written under a valid key whatever the names,
// listed with its kind taken from the key (a worker's record that names a
// domain serves none), and deleted as its keeper stops.
func TestPresence(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	ctx := testnats.Context(t, 10*time.Second)
	js := env.JS(t, "admin")
	kv, err := js.KeyValue(ctx, streams.BucketPresence)
	if err != nil {
		t.Fatal(err)
	}
	list := func() []records.Presence {
		t.Helper()
		live, err := streams.ListPresence(ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		return live
	}
	// A worker's record that claims a domain, under an odd name.
	forged, _ := json.Marshal(records.Presence{Name: "w", Kind: records.PresenceProcessor, Domains: []string{"payments"}, Types: []string{"greet"}})
	if _, err := kv.Put(ctx, streams.WorkerPresenceKey("a worker.with*odd>name", "1"), forged); err != nil {
		t.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		streams.KeepPresence(kctx, js, streams.ProcessorPresenceKey("payments", "p.1 ☃", streams.PresenceInstance()),
			records.Presence{Name: "p.1 ☃", Kind: records.PresenceProcessor, Domains: []string{"payments"}, Since: time.Now()}, slog.New(slog.DiscardHandler))
	}()
	var live []records.Presence
	testnats.Eventually(t, 5*time.Second, "the processor's record", func() bool { live = list(); return len(live) == 2 })
	kinds := map[string]records.Presence{}
	for _, p := range live {
		kinds[p.Kind] = p
	}
	if w := kinds[records.PresenceWorker]; len(w.Domains) != 0 || !slices.Equal(w.Types, []string{"greet"}) {
		t.Errorf("the worker's record lists %+v, want types [greet] and no domain", w)
	}
	if p := kinds[records.PresenceProcessor]; p.Name != "p.1 ☃" || !slices.Equal(p.Domains, []string{"payments"}) || p.At.IsZero() {
		t.Errorf("the processor's record is %+v", p)
	}
	stop()
	testnats.Stopped(t, "presence", done)
	if live := list(); len(live) != 1 || live[0].Kind != records.PresenceWorker {
		t.Errorf("after the keeper stopped: %+v, want only the worker's record", live)
	}
}
