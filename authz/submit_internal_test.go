package authz

import (
	"errors"
	"testing"

	"github.com/tickflow/tickflow/pipeline"
)

// TestSubmitCutShortAfterItsRecord: authz died (or the token's publish
// failed) after the batch's record and its submitter index were stored and
// before its token: the caller had no answer, and the batch is recorded
// InProcess, listed, and queued nowhere. Its retry with the same
// idempotency key answers the same id as a duplicate and publishes the
// token; a further retry adds no second one.
func TestSubmitCutShortAfterItsRecord(t *testing.T) {
	s, table, ctx := internalService(t, `labels: {jobs: {domain: pay, users: [alice], mode: atomic, priority: high, functions: {noop: {}}}}`)
	l := table.Labels["jobs"]
	calls := []CallSpec{{Type: "noop"}}
	// The submission up to its record, and then the crash.
	b, err := s.build(ctx, "jobs", l, "alice", calls, "", "order-7", l.Priority, false)
	if err != nil {
		t.Fatal(err)
	}
	id := b.batch.ID
	queued := func() []uint64 { return queuedIDs(ctx, t, s, pipeline.High) }
	if got := queued(); len(got) != 0 {
		t.Fatalf("queued %v before the retry, want nothing", got)
	}
	rec, err := s.record(ctx, id)
	if err != nil || rec.Status != pipeline.InProcess {
		t.Fatalf("record after the crash: %+v, %v; want InProcess", rec, err)
	}
	if listed := listAll(ctx, t, s, "alice", 10); len(listed) != 1 || listed[0] != id {
		t.Fatalf("alice's listing %v; want [%d]", listed, id)
	}
	for range 2 {
		rep, err := s.send(ctx, "alice", &SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: "order-7"})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep.(*SendReply); r.ID != id || !r.Duplicate {
			t.Fatalf("retry answered %+v, want batch %d as a duplicate", r, id)
		}
		if got := queued(); len(got) != 1 || got[0] != id {
			t.Fatalf("queued %v after the retry, want [%d]", got, id)
		}
	}
}

// TestIdempotentRetryTakesItsSlot: a submission with an idempotency key
// that got its id and died before it took a slot of its label leaves the
// slot to others; its retry takes one like any submission, and is refused
// while the label is full rather than run beyond its limit.
func TestIdempotentRetryTakesItsSlot(t *testing.T) {
	s, _, ctx := internalService(t, `labels: {limited: {domain: pay, users: [alice], mode: atomic, priority: high, max_concurrent: 1, functions: {noop: {}}}}`)
	calls := []CallSpec{{Type: "noop"}}
	if _, dup, err := s.assignID(ctx, "alice", "order-8"); err != nil || dup {
		t.Fatalf("the first submission's id: dup %v, %v", dup, err)
	}
	// Meanwhile another batch takes the label's only slot.
	if _, err := s.send(ctx, "alice", &SendRequest{Label: "limited", Functions: calls}); err != nil {
		t.Fatal(err)
	}
	_, err := s.send(ctx, "alice", &SendRequest{Label: "limited", Functions: calls, IdempotencyKey: "order-8"})
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != CodeConflict {
		t.Fatalf("retry while the label is full: %v, want a conflict (the label's limit)", err)
	}
	if got := queuedIDs(ctx, t, s, pipeline.High); len(got) != 1 {
		t.Fatalf("queued %v, want only the batch holding the slot", got)
	}
}
