package authz

import (
	"errors"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// executed is the callback of a pay processor that ran b's one call.
func executed(p *parts, b *pipeline.Batch) *records.Callback {
	return &records.Callback{V: 1, BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Processor: "p1",
		Outcome: pipeline.ExecutedOutcome(1), Attempts: 2, At: p.clock.Now(), Outputs: []pipeline.Output{{Index: 0, Type: "noop", Data: pipeline.MustPayload("ok")}}}
}

// TestCallbackApplierApply: a callback makes its batch's record terminal
// with its outcome, attempts, outputs, time and a history event; a repeat
// writes nothing; a callback that names another domain than its batch's,
// or a batch without a record, changes nothing and is not recorded; a
// record that does not decode is ErrUnreadable, and is left as it is.
func TestCallbackApplierApply(t *testing.T) {
	p := newParts(t)
	ca := p.callbackApplier(p.keyOrders())
	bs := queued(t, p, 2)
	revision := func(id uint64) uint64 {
		t.Helper()
		e, err := p.h.batches.Get(p.ctx, streams.BatchKey(id))
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}

	recorded, err := ca.apply(p.ctx, executed(p, bs[0]))
	if err != nil || !recorded {
		t.Fatalf("apply: recorded %v, %v", recorded, err)
	}
	rec := p.record(t, bs[0].ID)
	last := rec.History[len(rec.History)-1]
	if rec.Status != pipeline.Executed || rec.Attempts != 2 || len(rec.Outputs) != 1 || string(rec.Outputs[0].Data) != string(pipeline.MustPayload("ok")) ||
		!rec.FinishedAt.Equal(p.clock.Now()) || last.What != records.EventCallback {
		t.Fatalf("record after the callback: %s, %d attempts, outputs %+v, finished %v, last event %+v", rec.Status, rec.Attempts, rec.Outputs, rec.FinishedAt, last)
	}
	rev := revision(bs[0].ID)
	again := executed(p, bs[0])
	again.Outcome = pipeline.RejectedOutcome("late")
	if recorded, err := ca.apply(p.ctx, again); err != nil || !recorded || revision(bs[0].ID) != rev || p.record(t, bs[0].ID).Status != pipeline.Executed {
		t.Fatalf("repeated callback: recorded %v, %v; revision %d (was %d)", recorded, err, revision(bs[0].ID), rev)
	}

	crossed := executed(p, bs[1])
	crossed.Domain = "ship"
	rev = revision(bs[1].ID)
	if recorded, err := ca.apply(p.ctx, crossed); err != nil || recorded || revision(bs[1].ID) != rev {
		t.Fatalf("another domain's callback: recorded %v, %v; revision %d (was %d)", recorded, err, revision(bs[1].ID), rev)
	}
	if recorded, err := ca.apply(p.ctx, &records.Callback{V: 1, BatchID: 1 << 40, Domain: "pay", Outcome: pipeline.ExecutedOutcome(1)}); err != nil || recorded {
		t.Fatalf("callback of an unrecorded batch: recorded %v, %v", recorded, err)
	}

	if _, err := p.h.batches.Put(p.ctx, streams.BatchKey(bs[1].ID), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.apply(p.ctx, executed(p, bs[1])); !errors.Is(err, ErrUnreadable) {
		t.Fatalf("callback of an unreadable record: %v, want ErrUnreadable", err)
	}
	if e, err := p.h.batches.Get(p.ctx, streams.BatchKey(bs[1].ID)); err != nil || string(e.Value()) != "garbage" {
		t.Fatalf("unreadable record rewritten: %v", err)
	}
}

// TestCallbackApplierReleases: a batch's callback frees what it held: its
// label's concurrency slot (another batch may take it then), and its key
// (the next batch of the key gets its token); its repeat releases again
// and queues nothing twice.
func TestCallbackApplierReleases(t *testing.T) {
	p := newParts(t)
	ko := p.keyOrders()
	ca := p.callbackApplier(ko)
	l := p.table.Labels["limited"]
	full := func(id uint64) bool {
		err := ca.slots.reserveSlots(p.ctx, "limited", l, "alice", id, false)
		if err != nil && codeOf(err) != api.CodeConflict {
			t.Fatal(err)
		}
		return err != nil
	}
	held := queued(t, p, 1)[0]
	if full(held.ID) {
		t.Fatal("the first batch finds the label full")
	}
	next := queued(t, p, 1)[0]
	if !full(next.ID) {
		t.Fatal("a second batch takes a slot of a label of one")
	}
	if _, err := p.store.updateRecord(p.ctx, held.ID, func(rec *records.BatchRecord) (bool, error) {
		rec.Batch.Label = "limited"
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.apply(p.ctx, executed(p, held)); err != nil {
		t.Fatal(err)
	}
	if full(next.ID) {
		t.Fatal("the label's slot was not freed by its batch's callback")
	}

	var keyed []*pipeline.Batch
	for range 2 {
		b := p.recordOnly(t, p.batch(func(b *pipeline.Batch) { b.Key = "acct-1" }))
		if _, err := ko.admit(p.ctx, b, false, 0); err != nil {
			t.Fatal(err)
		}
		keyed = append(keyed, b)
	}
	if n0, n1 := len(p.tokens(t, pipeline.Med, keyed[0].ID)), len(p.tokens(t, pipeline.Med, keyed[1].ID)); n0 != 1 || n1 != 0 {
		t.Fatalf("before the head finished: %d and %d tokens, want 1 and 0", n0, n1)
	}
	for range 2 {
		if _, err := ca.apply(p.ctx, executed(p, keyed[0])); err != nil {
			t.Fatal(err)
		}
		if toks := p.tokens(t, pipeline.Med, keyed[1].ID); len(toks) != 1 {
			t.Fatalf("the key's next batch after its head's callback: tokens %v, want one", toks)
		}
	}
}
