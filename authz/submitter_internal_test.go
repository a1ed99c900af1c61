package authz

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/streams"
)

const listTable = `labels: {jobs: {domain: pay, users: [alice, bob, carol], mode: atomic, priority: high, functions: {noop: {}}}}`

func sendNoop(ctx context.Context, t *testing.T, s *Service, user string) uint64 {
	t.Helper()
	rep, err := s.send(ctx, user, &SendRequest{Label: "jobs", Functions: []CallSpec{{Type: "noop"}}})
	if err != nil {
		t.Fatal(err)
	}
	return rep.(*SendReply).ID
}

// indexKeys lists user's submitter index keys.
func indexKeys(ctx context.Context, t *testing.T, s *Service, user string) []string {
	t.Helper()
	lister, err := s.batches.ListKeysFiltered(ctx, streams.SubmitterFilter(user))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// listAll pages through user's listing, limit items a page, and returns
// the ids, in the order listed.
func listAll(ctx context.Context, t *testing.T, s *Service, user string, limit int) []uint64 {
	t.Helper()
	var got []uint64
	req := ListRequest{Limit: limit}
	for page := 0; ; page++ {
		rep, err := s.list(ctx, user, &req)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range rep.(*ListReply).Items {
			got = append(got, it.ID)
		}
		next := rep.(*ListReply).Next
		if next == 0 {
			return got
		}
		if page == 1000 {
			t.Fatalf("no end of pages after %v", got)
		}
		req.Before = next
	}
}

func newestFirst(ids []uint64) []uint64 {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b uint64) int { return cmpID(b, a) })
	return out
}

// TestIndexKeyPerWindow: a submitter's batches share one index key per
// window of streams.SubmitterWindow ids, written once by the replica, and
// the listing still gives every batch of theirs and no other's, newest
// first, page after page, across windows shared with other submitters
// and between two replicas.
func TestIndexKeyPerWindow(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	var alice, bob []uint64
	for i := range 3 * streams.SubmitterWindow {
		alice = append(alice, sendNoop(ctx, t, s, "alice"))
		if i%5 == 0 {
			bob = append(bob, sendNoop(ctx, t, s, "bob"))
		}
	}
	want := map[string]bool{}
	for _, id := range alice {
		want[streams.SubmitterKey("alice", id)] = true
	}
	keys := indexKeys(ctx, t, s, "alice")
	if len(keys) != len(want) || len(keys) >= len(alice)/4 {
		t.Fatalf("alice's %d batches have index keys %v, want one per window: %d", len(alice), keys, len(want))
	}
	for _, k := range keys {
		if !want[k] {
			t.Fatalf("index key %s holds none of alice's batches %v", k, alice)
		}
	}
	for _, limit := range []int{1, 7, DefaultListLimit, MaxListLimit} {
		if got := listAll(ctx, t, s, "alice", limit); !slices.Equal(got, newestFirst(alice)) {
			t.Fatalf("alice's listing in pages of %d: %v, want %v", limit, got, newestFirst(alice))
		}
	}
	if got := listAll(ctx, t, s, "bob", 2); !slices.Equal(got, newestFirst(bob)) {
		t.Fatalf("bob's listing: %v, want %v", got, newestFirst(bob))
	}

	// A second replica takes ids of its own blocks; the listing holds the
	// batches of both.
	s2, err := New(ctx, s.nc, Options{Table: s.Table()})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		alice = append(alice, sendNoop(ctx, t, s2, "alice"), sendNoop(ctx, t, s, "alice"))
	}
	for _, on := range []*Service{s, s2} {
		if got := listAll(ctx, t, on, "alice", 5); !slices.Equal(got, newestFirst(alice)) {
			t.Fatalf("alice's listing after a second replica: %v, want %v", got, newestFirst(alice))
		}
	}
}

// TestIndexKeyOfEarlierVersions: an index key written one per batch,
// under the batch's own id (as earlier versions did), still lists its
// batch, once, beside the window keys.
func TestIndexKeyOfEarlierVersions(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	ids := []uint64{sendNoop(ctx, t, s, "carol"), sendNoop(ctx, t, s, "carol")}
	for _, id := range ids {
		if _, err := s.batches.Put(ctx, "by.carol."+strconv.FormatUint(id, 10), nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := listAll(ctx, t, s, "carol", 1); !slices.Equal(got, newestFirst(ids)) {
		t.Fatalf("carol's listing: %v, want %v", got, newestFirst(ids))
	}
}

// TestIndexWriteFailedIsRetried: a window whose index write failed is
// written by the next submission in it, not taken as stored; and the
// writes remembered stay bounded.
func TestIndexWriteFailedIsRetried(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	first := sendNoop(ctx, t, s, "alice")
	// The next id is in first's window (a replica's first id starts a
	// block, and a block holds whole windows): make that window's write a
	// failed one, and its key gone.
	failed := &indexWrite{done: make(chan struct{}), err: errors.New("stream unavailable")}
	close(failed.done)
	s.indexMarks.mu.Lock()
	for k := range s.indexMarks.marks {
		s.indexMarks.marks[k] = failed
	}
	s.indexMarks.mu.Unlock()
	if err := s.batches.Purge(ctx, streams.SubmitterKey("alice", first)); err != nil {
		t.Fatal(err)
	}
	second := sendNoop(ctx, t, s, "alice")
	if streams.SubmitterWindowOf(second) != streams.SubmitterWindowOf(first) {
		t.Fatalf("batches %d and %d in different windows: a replica's first id starts a block", first, second)
	}
	if keys := indexKeys(ctx, t, s, "alice"); !slices.Equal(keys, []string{streams.SubmitterKey("alice", first)}) {
		t.Fatalf("alice's index keys %v after the failed write, want the window's written again", keys)
	}
	if got := listAll(ctx, t, s, "alice", 10); !slices.Equal(got, []uint64{second, first}) {
		t.Fatalf("alice's listing %v, want [%d %d]", got, second, first)
	}

	// Bounded: past maxIndexMarks, the writes that ended are forgotten.
	s.indexMarks.mu.Lock()
	for w := range uint64(maxIndexMarks) {
		s.indexMarks.marks[indexMark{user: "bob", window: w * streams.SubmitterWindow}] = failed
	}
	s.indexMarks.mu.Unlock()
	sendNoop(ctx, t, s, "bob")
	s.indexMarks.mu.Lock()
	n := len(s.indexMarks.marks)
	s.indexMarks.mu.Unlock()
	if n > 2 {
		t.Fatalf("%d index writes remembered after the bound was reached, want the ended ones forgotten", n)
	}
}

// TestIndexKeyLostIsWrittenAgain: a stored window key is trusted for
// indexMarkTTL only; a key lost afterwards (purged by hand, say) is
// written again by the next submission in its window, which is listed.
func TestIndexKeyLostIsWrittenAgain(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	first := sendNoop(ctx, t, s, "alice")
	if err := s.batches.Purge(ctx, streams.SubmitterKey("alice", first)); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(2 * indexMarkTTL)
	s.opts.Now = func() time.Time { return later }
	second := sendNoop(ctx, t, s, "alice")
	if streams.SubmitterWindowOf(second) != streams.SubmitterWindowOf(first) {
		t.Fatalf("batches %d and %d in different windows: a replica's first id starts a block", first, second)
	}
	if got := listAll(ctx, t, s, "alice", 10); !slices.Equal(got, []uint64{second, first}) {
		t.Fatalf("alice's listing %v after her window's key was lost, want [%d %d]", got, second, first)
	}
}

// TestIndexSharedWriteFailureRetried: a submission that joined its
// window's write in flight, which then fails, writes the key once more on
// its own and is answered, and listed.
func TestIndexSharedWriteFailureRetried(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	first := sendNoop(ctx, t, s, "alice")
	if err := s.batches.Purge(ctx, streams.SubmitterKey("alice", first)); err != nil {
		t.Fatal(err)
	}
	inFlight := &indexWrite{done: make(chan struct{})}
	s.indexMarks.mu.Lock()
	s.indexMarks.marks[indexMark{user: "alice", window: streams.SubmitterWindowOf(first)}] = inFlight
	s.indexMarks.mu.Unlock()
	type result struct {
		id  uint64
		err error
	}
	sent := make(chan result, 1)
	go func() {
		rep, err := s.send(ctx, "alice", &SendRequest{Label: "jobs", Functions: []CallSpec{{Type: "noop"}}})
		if err != nil {
			sent <- result{err: err}
			return
		}
		sent <- result{id: rep.(*SendReply).ID}
	}()
	// Once its record is written, the submission waits on the shared write.
	testnats.Eventually(t, 10*time.Second, "the second batch recorded", func() bool {
		_, err := s.record(ctx, first+1)
		return err == nil
	})
	inFlight.err = errors.New("publish lost")
	close(inFlight.done)
	r := <-sent
	if r.err != nil || r.id != first+1 {
		t.Fatalf("send after the shared index write failed: %d, %v; want batch %d answered", r.id, r.err, first+1)
	}
	if got := listAll(ctx, t, s, "alice", 10); !slices.Equal(got, []uint64{first + 1, first}) {
		t.Fatalf("alice's listing %v, want [%d %d]", got, first+1, first)
	}
}
