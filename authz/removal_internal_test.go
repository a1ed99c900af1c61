package authz

import (
	"errors"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// liveItem is the queue item of b's only token, as a listing shows it.
func liveItem(t *testing.T, p *parts, b *pipeline.Batch) api.QueueItem {
	t.Helper()
	var out []api.QueueItem
	if _, err := p.inspector(p.keyOrders()).scanQueue(p.ctx, b.Domain, b.Priority, 0, func(it api.QueueItem, _ records.Token, _ *streams.ProgressEntry) {
		if it.ID == b.ID {
			out = append(out, it)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 {
		t.Fatalf("batch %d has %d live tokens, want 1", b.ID, len(out))
	}
	return out[0]
}

// TestRemoverRemove: remove finishes the batch behind a live token (its
// progress Done as RemovedByOwner, its token deleted, its callback
// published). An item that is stale (the batch moved on since it was
// listed) is a conflict that writes nothing; a batch a processor finished
// first keeps its processor's outcome, and the answer is 409.
func TestRemoverRemove(t *testing.T) {
	p := newParts(t)
	rv := p.remover()
	bs := queued(t, p, 3)

	id, err := rv.remove(p.ctx, "pay", liveItem(t, p, bs[0]))
	if err != nil || id != bs[0].ID {
		t.Fatalf("remove: %d, %v; want %d", id, err, bs[0].ID)
	}
	if !p.removedBy(t, bs[0]) || len(p.tokens(t, pipeline.Med, bs[0].ID)) != 0 {
		t.Fatalf("removed batch: progress %+v, callbacks %+v, tokens %v", p.loadProgress(t, bs[0]), p.callbacks(t, bs[0].ID), p.tokens(t, pipeline.Med, bs[0].ID))
	}

	// Stale: a processor rotated the batch since it was listed.
	it := liveItem(t, p, bs[1])
	st := p.loadProgress(t, bs[1])
	st.Rotation = 1
	if err := p.progress.Save(p.ctx, "pay", st); err != nil {
		t.Fatal(err)
	}
	if _, err := rv.remove(p.ctx, "pay", it); !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("remove of a stale item: %v, want a conflict", err)
	}
	if now := p.loadProgress(t, bs[1]); now.Rev != st.Rev || len(p.callbacks(t, bs[1].ID)) != 0 || len(p.tokens(t, pipeline.Med, bs[1].ID)) != 1 {
		t.Fatalf("a stale remove wrote: progress rev %d (was %d), callbacks %v", now.Rev, st.Rev, p.callbacks(t, bs[1].ID))
	}

	// Finished first: the processor's callback is the batch's.
	it = liveItem(t, p, bs[2])
	p.finishedBy(t, bs[2], pipeline.ExecutedOutcome(1))
	if _, err := rv.remove(p.ctx, "pay", it); codeOf(err) != api.CodeConflict {
		t.Fatalf("remove of a batch finished first: %v, want %d", err, api.CodeConflict)
	}
	if cbs := p.callbacks(t, bs[2].ID); len(cbs) != 1 || cbs[0].Outcome.Status != pipeline.Executed {
		t.Fatalf("callbacks of the batch finished first: %+v", cbs)
	}
}

// TestRemoverMarkRemovedLosesToAWrite: markRemoved is a compare-and-set
// on the progress as it was read: a processor's write in between wins,
// the removal gets streams.ErrConflict, and the processor's progress
// stands.
func TestRemoverMarkRemovedLosesToAWrite(t *testing.T) {
	p := newParts(t)
	rv := p.remover()
	b := queued(t, p, 1)[0]
	read := p.loadProgress(t, b)
	theirs := p.loadProgress(t, b)
	theirs.Next = 1
	if err := p.progress.Save(p.ctx, "pay", theirs); err != nil {
		t.Fatal(err)
	}
	if err := rv.markRemoved(p.ctx, b, read, ""); !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("markRemoved on a stale read: %v, want a conflict", err)
	}
	if st := p.loadProgress(t, b); st.State != records.Queued || st.Next != 1 || st.Rev != theirs.Rev {
		t.Fatalf("progress after the lost write: %+v", st.Progress)
	}
}

// TestRemoverCancel: a submitter's cancel and the owner's finish a batch
// wherever it stands (queued, scheduled: its schedule purged too); a
// batch of another's answers 404 as a missing one does, writing nothing;
// a repeat answers as the first and publishes no second callback; a
// cancel cut short after its progress is finished by its repeat; a batch
// already finished otherwise is a 409.
func TestRemoverCancel(t *testing.T) {
	p := newParts(t)
	rv := p.remover()
	bs := queued(t, p, 3)
	ko := p.keyOrders()
	later := p.recordOnly(t, p.batch(func(b *pipeline.Batch) { b.RunAt = p.clock.Now().Add(time.Hour) }))
	if err := ko.scheduled.publishFirst(p.ctx, later, false); err != nil {
		t.Fatal(err)
	}
	// Cut short: the progress written, the token and callback not.
	st := p.loadProgress(t, bs[2])
	if err := rv.markRemoved(p.ctx, bs[2], st, "cancelled by alice"); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		user     string
		b        *pipeline.Batch
		id       uint64
		wantCode int
	}{
		{name: "another's", user: "bob", b: bs[0], wantCode: api.CodeNotFound},
		{name: "missing", user: "alice", id: 1 << 40, wantCode: api.CodeNotFound},
		{name: "the submitter's", user: "alice", b: bs[0]},
		{name: "repeated", user: "alice", b: bs[0]},
		{name: "by the owner", user: DefaultOwner, b: bs[1]},
		{name: "cut short, repeated", user: "alice", b: bs[2]},
		{name: "scheduled", user: "alice", b: later},
	} {
		id := tc.id
		if tc.b != nil {
			id = tc.b.ID
		}
		out, err := rv.cancel(p.ctx, tc.user, &api.IDRequest{ID: id})
		if codeOf(err) != tc.wantCode {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.wantCode)
		}
		if tc.b == nil {
			continue
		}
		if tc.wantCode != 0 {
			if st := p.loadProgress(t, tc.b); st.State == records.Done || len(p.callbacks(t, id)) != 0 {
				t.Fatalf("%s: a refused cancel wrote progress %+v", tc.name, st.Progress)
			}
			continue
		}
		if rep := out.(*api.CancelReply); rep.ID != id || rep.Status != pipeline.RemovedByOwner {
			t.Fatalf("%s: reply %+v", tc.name, rep)
		}
		if !p.removedBy(t, tc.b) || len(p.tokens(t, pipeline.Med, id)) != 0 {
			t.Fatalf("%s: progress %+v, callbacks %+v, tokens %v", tc.name, p.loadProgress(t, tc.b), p.callbacks(t, id), p.tokens(t, pipeline.Med, id))
		}
	}
	if sched, _, err := ko.scheduled.list(p.ctx, "pay", pipeline.Med, 0); err != nil || len(sched) != 0 {
		t.Fatalf("schedules left after the cancel: %v, %v", sched, err)
	}
	info, err := p.h.scheduled.Info(p.ctx)
	if err != nil || info.State.Msgs != 0 {
		t.Fatalf("SCHEDULED holds %v messages after the cancel (%v)", info.State.Msgs, err)
	}

	// Finished as executed: its record says so, and a cancel is refused.
	done := queued(t, p, 1)[0]
	if _, err := rv.store.updateRecord(p.ctx, done.ID, func(rec *records.BatchRecord) (bool, error) {
		rec.Status = pipeline.Executed
		return true, nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := rv.cancel(p.ctx, "alice", &api.IDRequest{ID: done.ID}); codeOf(err) != api.CodeConflict {
		t.Fatalf("cancel of a finished batch: %v, want %d", err, api.CodeConflict)
	}
}
