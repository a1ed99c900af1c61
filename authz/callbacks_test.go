package authz_test

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestCallbackTimeOfFirstStepBatch: a batch finished in its first step (no
// progress record written) still gets the time of its callback in its
// history.
func TestCallbackTimeOfFirstStepBatch(t *testing.T) {
	b := setup(t)
	before := time.Now()
	id := b.send(t, "alice", "jobs", noop())
	rec := b.settled(t, id)
	after := time.Now()
	var found bool
	for _, e := range rec.History {
		if e.What != "callback" {
			continue
		}
		found = true
		if e.At.Before(before.Add(-time.Second)) || e.At.After(after.Add(time.Second)) {
			t.Fatalf("callback event at %s, want between %s and %s", e.At, before, after)
		}
	}
	if !found {
		t.Fatalf("no callback event in %+v", rec.History)
	}
}

// TestRunLogs: authz says when it stops, and leaves "batch finished" at
// info to the processor.
func TestRunLogs(t *testing.T) {
	b := setup(t)
	sink := b.startAuthzWith(t, authz.Options{})
	id := b.send(t, "alice", "jobs", noop())
	b.settled(t, id)
	b.stop()
	var finished, stopped int
	for _, r := range sink.Records(t) {
		switch r["msg"] {
		case "batch finished":
			finished++
			if r["level"] != "DEBUG" {
				t.Fatalf("authz logs batch finished at %v, want DEBUG", r["level"])
			}
		case "authz stopped":
			stopped++
			if r["level"] != "INFO" {
				t.Fatalf("authz stopped logged at %v, want INFO", r["level"])
			}
		}
	}
	if finished != 1 || stopped != 1 {
		t.Fatalf("batch finished %d times, authz stopped %d times; want 1 and 1", finished, stopped)
	}
}

// TestCallbackFromAnotherDomainRefused: a callback is applied only when its
// subject, its body and the batch agree on the domain, so a processor
// granted one domain's callbacks subject cannot finish another's batches.
func TestCallbackFromAnotherDomainRefused(t *testing.T) {
	b := setup(t)
	sink := b.startAuthzWith(t, authz.Options{})
	id := b.send(t, "alice", "jobs", noop()) // queued: nothing ticks
	js := b.env.JS(t, "processor")
	forge := func(cb *records.Callback, subject string) {
		t.Helper()
		m, err := streams.CallbackMsg(cb)
		if err != nil {
			t.Fatal(err)
		}
		m.Subject = subject
		m.Header.Del(nats.MsgIdHdr)
		if _, err := js.PublishMsg(b.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	executed := pipeline.Outcome{Status: pipeline.Executed}
	forge(&records.Callback{V: 1, BatchID: id, Domain: "other", Outcome: executed}, streams.CallbackSubject("other"))
	forge(&records.Callback{V: 1, BatchID: id, Domain: domain, Outcome: executed}, streams.CallbackSubject("other"))
	refused := func(msg string) int {
		n := 0
		for _, r := range sink.Records(t) {
			if r["msg"] == msg {
				n++
			}
		}
		return n
	}
	testnats.Eventually(t, 10*time.Second, "both callbacks refused", func() bool {
		return refused("callback refused: the batch belongs to another domain") == 1 &&
			refused("callback refused: its subject and its domain differ") == 1
	})
	if rec := b.record(t, id); rec.Status.Terminal() {
		t.Fatalf("batch %d is %s after forged callbacks", id, rec.Status)
	}
}

// TestCallbackOnARecordChangedMeanwhile: authz writes a callback with
// compare-and-set on the revision it created the record at; a record that
// changed meanwhile (here by admin) makes it apply the callback on top of
// the stored record instead, losing neither change.
func TestCallbackOnARecordChangedMeanwhile(t *testing.T) {
	b := setup(t)
	id := b.send(t, "alice", "jobs", noop()) // queued: nothing ticks
	kv, err := b.env.JS(t, "admin").KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(b.ctx, streams.BatchKey(id))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := records.Decode[records.BatchRecord](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	rec.History = append(rec.History, records.Event{At: time.Now().UTC(), What: "note", Detail: "changed by admin"})
	data, err := records.Encode(&rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(b.ctx, streams.BatchKey(id), data, e.Revision()); err != nil {
		t.Fatal(err)
	}
	m, err := streams.CallbackMsg(&records.Callback{V: 1, BatchID: id, Domain: domain, Outcome: pipeline.Outcome{Status: pipeline.Executed, Executed: 1}, Attempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.env.JS(t, "processor").PublishMsg(b.ctx, m); err != nil {
		t.Fatal(err)
	}
	var got *api.BatchRecord
	testnats.Eventually(t, 10*time.Second, "the callback applied", func() bool {
		got = b.record(t, id)
		return got.Status.Terminal()
	})
	var note, callback bool
	for _, ev := range got.History {
		note = note || ev.What == "note"
		callback = callback || ev.What == "callback"
	}
	if got.Status != pipeline.Executed || !note || !callback {
		t.Fatalf("record %s with history %+v: want Executed with both the note and the callback", got.Status, got.History)
	}
}

// TestRepeatedCallbackFreesTheSlot: authz writes the terminal record, then
// frees the batch's concurrency slot, acknowledging the callback only then;
// a slot still held when the callback comes again (the release failed, or
// authz died in between) is freed by the repeated callback.
func TestRepeatedCallbackFreesTheSlot(t *testing.T) {
	b := setup(t)
	id := b.send(t, "alice", "limited", noop())
	locks, err := b.env.JS(t, "admin").KeyValue(b.ctx, streams.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	held := func() bool {
		e, err := locks.Get(b.ctx, streams.SlotKey("limited"))
		if err != nil {
			return false
		}
		return strings.Contains(string(e.Value()), fmt.Sprintf(`"%d"`, id))
	}
	if !held() {
		t.Fatal("the submission took no slot")
	}
	callback := func() {
		t.Helper()
		m, err := streams.CallbackMsg(&records.Callback{V: 1, BatchID: id, Domain: domain, Outcome: pipeline.Outcome{Status: pipeline.Executed, Executed: 1}, Attempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Del(nats.MsgIdHdr) // a redelivery, as the stream would make it
		if _, err := b.env.JS(t, "processor").PublishMsg(b.ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	callback()
	testnats.Eventually(t, 10*time.Second, "the slot freed", func() bool { return !held() })
	// As if the release had failed: the slot is held again.
	if _, err := locks.Put(b.ctx, streams.SlotKey("limited"), []byte(fmt.Sprintf(`{"ids":{"%d":"%s"}}`, id, time.Now().UTC().Format(time.RFC3339Nano)))); err != nil {
		t.Fatal(err)
	}
	callback()
	testnats.Eventually(t, 10*time.Second, "the repeated callback to free the slot", func() bool { return !held() })
}
