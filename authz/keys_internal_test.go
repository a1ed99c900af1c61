package authz

import (
	"testing"

	"github.com/tickflow/tickflow/pipeline"
)

// TestReleaseRepeatedAfterCrash: authz died between the compare-and-set
// that took a finished head off its key and the publish of the next head's
// token. The redelivered callback releases again: the batch is no longer
// listed, and the current head gets its token; a further repeat adds no
// second one.
func TestReleaseRepeatedAfterCrash(t *testing.T) {
	s, table, ctx := internalService(t, `labels: {seq: {domain: pay, users: [alice], mode: atomic, priority: med, functions: {noop: {}}}}`)
	send := func() uint64 {
		t.Helper()
		rep, err := s.submit(ctx, "seq", table.Labels["seq"], "alice", []CallSpec{{Type: "noop"}}, "k", "", pipeline.Med, false)
		if err != nil {
			t.Fatal(err)
		}
		return rep.ID
	}
	queued := func() []uint64 { return queuedIDs(ctx, t, s, pipeline.Med) }
	k1, k2 := send(), send()
	if got := queued(); len(got) != 1 || got[0] != k1 {
		t.Fatalf("queued %v, want only the key's head %d", got, k1)
	}
	// The compare-and-set of k1's release, and then the crash.
	if _, at, err := s.keyOrder.Remove(ctx, "pay", "k", k1); err != nil || at != 0 {
		t.Fatalf("remove: at %d, %v", at, err)
	}
	if got := queued(); len(got) != 1 {
		t.Fatalf("queued %v before the repeat, want k2 (%d) without a token", got, k2)
	}
	for range 2 {
		if err := s.releaseKey(ctx, "pay", "k", k1); err != nil {
			t.Fatal(err)
		}
		if got := queued(); len(got) != 2 || got[1] != k2 {
			t.Fatalf("queued %v after the repeated release, want [%d %d]", got, k1, k2)
		}
	}
}
