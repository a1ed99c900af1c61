package authz

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

const listTable = `labels: {jobs: {domain: pay, users: [alice, bob, carol], mode: atomic, priority: high, functions: {noop: {}}}}`

func sendNoop(ctx context.Context, t *testing.T, s *Service, user string) uint64 {
	t.Helper()
	rep, err := s.intake.send(ctx, user, &api.SendRequest{Label: "jobs", Functions: []api.CallSpec{{Type: "noop"}}})
	if err != nil {
		t.Fatal(err)
	}
	return rep.ID
}

// listAll pages through user's listing, limit items a page, and returns
// the ids, in the order listed.
func listAll(ctx context.Context, t *testing.T, s *Service, user string, limit int) []uint64 {
	t.Helper()
	var got []uint64
	req := api.ListRequest{Limit: limit}
	for page := 0; ; page++ {
		rep, err := s.submitters.list(ctx, user, &req)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range rep.(*api.ListReply).Items {
			got = append(got, it.ID)
		}
		next := rep.(*api.ListReply).Next
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
	slices.Reverse(out)
	return out
}

// TestListInOrderAcceptedAcrossReplicas: two replicas take ids of blocks
// of their own, so ids are not the order batches were accepted in; the
// listing is, newest first, page after page, each batch once, whichever
// replica answers, and another's batches are not in it.
func TestListInOrderAcceptedAcrossReplicas(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	s2, err := New(ctx, s.nc, Options{Table: s.Table()})
	if err != nil {
		t.Fatal(err)
	}
	var alice, bob []uint64
	for i := range 40 {
		on := s
		if i%3 == 1 {
			on = s2
		}
		alice = append(alice, sendNoop(ctx, t, on, "alice"))
		if i%7 == 0 {
			bob = append(bob, sendNoop(ctx, t, s2, "bob"))
		}
	}
	if slices.IsSorted(alice) {
		t.Fatalf("ids %v in the order accepted: the two replicas should have taken blocks of their own", alice)
	}
	for _, on := range []*Service{s, s2} {
		for _, limit := range []int{1, 7, api.DefaultListLimit, api.MaxListLimit} {
			if got := listAll(ctx, t, on, "alice", limit); !slices.Equal(got, newestFirst(alice)) {
				t.Fatalf("alice's listing in pages of %d: %v, want %v", limit, got, newestFirst(alice))
			}
		}
	}
	if got := listAll(ctx, t, s, "bob", 2); !slices.Equal(got, newestFirst(bob)) {
		t.Fatalf("bob's listing: %v, want %v", got, newestFirst(bob))
	}
}

// TestListOfConcurrentSubmissions: batches sent at once, on two
// replicas, share index entries and race for the subject's end; each is
// listed exactly once, and a page costs far fewer entries than batches.
func TestListOfConcurrentSubmissions(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	s2, err := New(ctx, s.nc, Options{Table: s.Table()})
	if err != nil {
		t.Fatal(err)
	}
	const senders, each = 8, 25
	ids := make(chan uint64, senders*each)
	var wg sync.WaitGroup
	for g := range senders {
		on := s
		if g%2 == 1 {
			on = s2
		}
		wg.Go(func() {
			for range each {
				rep, err := on.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: []api.CallSpec{{Type: "noop"}}})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- rep.ID
			}
		})
	}
	wg.Wait()
	close(ids)
	want := map[uint64]bool{}
	for id := range ids {
		want[id] = true
	}
	got := listAll(ctx, t, s2, "alice", 9)
	seen := map[uint64]bool{}
	for _, id := range got {
		if seen[id] || !want[id] {
			t.Fatalf("batch %d listed twice, or not alice's: %v", id, got)
		}
		seen[id] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("%d of alice's %d batches listed", len(seen), len(want))
	}
}

// TestIndexTailOutOfDateIsReadAgain: a replica whose idea of the index's
// last entry is out of date (another replica wrote after it, or its write
// was stored though its answer was lost) loses its compare-and-set, reads
// the last entry and appends after it: nothing is listed twice or lost.
func TestIndexTailOutOfDateIsReadAgain(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	first := sendNoop(ctx, t, s, "alice")
	second := sendNoop(ctx, t, s, "alice")
	s.submitters.marks.mu.Lock()
	l := s.submitters.marks.users["alice"]
	s.submitters.marks.mu.Unlock()
	l.tail = indexTail{seq: 1} // the first entry: out of date
	third := sendNoop(ctx, t, s, "alice")
	// A write stored once already, tried again after the tail moved on:
	// the server answers it as a duplicate.
	if err := s.submitters.appendIndex("alice", &indexLog{}, []uint64{second}); err != nil {
		t.Fatal(err)
	}
	if got := listAll(ctx, t, s, "alice", 2); !slices.Equal(got, []uint64{third, second, first}) {
		t.Fatalf("alice's listing %v, want [%d %d %d]", got, third, second, first)
	}

	// Bounded: past maxIndexUsers, the submitters with nothing being
	// written are forgotten.
	s.submitters.marks.mu.Lock()
	for i := range maxIndexUsers {
		s.submitters.marks.users[strconv.Itoa(i)] = &indexLog{}
	}
	s.submitters.marks.mu.Unlock()
	sendNoop(ctx, t, s, "bob")
	s.submitters.marks.mu.Lock()
	n := len(s.submitters.marks.users)
	s.submitters.marks.mu.Unlock()
	if n > 2 {
		t.Fatalf("%d submitters remembered past the bound, want the idle ones forgotten", n)
	}
}

// TestIndexKeyOfEarlierVersions: batches indexed only by the keys of
// earlier versions (by.<user>.<id>) are listed after the index's, each
// once, newest id first.
func TestIndexKeyOfEarlierVersions(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	now := time.Now().UTC()
	var old []uint64
	for _, id := range []uint64{1 << 40, 1<<40 + 1, 1<<40 + 100} {
		rec := records.BatchRecord{Batch: pipeline.Batch{ID: id, Label: "jobs", Domain: "pay", Submitter: "carol", CreatedAt: now}, Status: pipeline.InProcess, CreatedAt: now}
		data, err := records.Encode(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.batches.Put(ctx, streams.BatchKey(id), data); err != nil {
			t.Fatal(err)
		}
		if _, err := s.store.batches.Put(ctx, "by.carol."+strconv.FormatUint(id, 10), nil); err != nil {
			t.Fatal(err)
		}
		old = append(old, id)
	}
	recent := sendNoop(ctx, t, s, "carol")
	want := append([]uint64{recent}, newestFirst(old)...)
	for _, limit := range []int{1, 2, 10} {
		if got := listAll(ctx, t, s, "carol", limit); !slices.Equal(got, want) {
			t.Fatalf("carol's listing in pages of %d: %v, want %v", limit, got, want)
		}
	}
}

// TestListCursorIsTheCallers: a cursor that is no position of the
// caller's listing (a batch id, as earlier versions took, or a position
// in another's) is refused with 400, and shows nothing of another's.
func TestListCursorIsTheCallers(t *testing.T) {
	s, _, ctx := internalService(t, listTable)
	sendNoop(ctx, t, s, "bob")
	sendNoop(ctx, t, s, "bob")
	rep, err := s.submitters.list(ctx, "bob", &api.ListRequest{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	next := rep.(*api.ListReply).Next
	if next == 0 {
		t.Fatal("bob's first page of one has no next")
	}
	a := sendNoop(ctx, t, s, "alice")
	for _, before := range []uint64{next, a, 42, 1<<8 | 200} {
		_, err := s.submitters.list(ctx, "alice", &api.ListRequest{Before: before})
		var e *Error
		if !errors.As(err, &e) || e.Code != api.CodeBadRequest {
			t.Fatalf("alice lists before %d: %v, want a 400", before, err)
		}
	}
}

// TestListReadsBoundedByThePage: however many batches a submitter has
// (each its own idempotent, keyed submission: each takes an id block of
// its own), a page costs reads in proportion to its limit, not to that
// history. Counted on the wire: every answer the server sends authz
// during the listing (direct gets, and a key listing's messages).
func TestListReadsBoundedByThePage(t *testing.T) {
	s, _, env, ctx := internalServiceEnv(t, listTable, 60*time.Second)
	const history = 600
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < history; i += 4 {
				n := strconv.Itoa(i)
				if _, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: []api.CallSpec{{Type: "noop"}}, Key: "k" + n, IdempotencyKey: "i" + n}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	admin := env.Conn(t, "admin")
	answers := make(chan *nats.Msg, 1<<16)
	sub, err := admin.ChanSubscribe(streams.InboxPrefix("authz")+".>", answers)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	const limit = 10
	rep, err := s.submitters.list(ctx, "alice", &api.ListRequest{Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rep.(*api.ListReply).Items); n != limit {
		t.Fatalf("%d items, want %d", n, limit)
	}
	// The server delivers to one connection in order: once a message sent
	// after the listing arrives, every answer of the listing has.
	marker := streams.InboxPrefix("authz") + ".marker"
	if err := admin.Publish(marker, nil); err != nil {
		t.Fatal(err)
	}
	reads := 0
	for m := range answers {
		if m.Subject == marker {
			break
		}
		reads++
	}
	// The page's entries and records, at most listReadsPerItem each per
	// item, the last entry, and the look for keys of earlier versions.
	if bound := 2*listReadsPerItem*limit + 2; reads > bound {
		t.Fatalf("a page of %d read %d answers, with %d batches recorded; want at most %d", limit, reads, history, bound)
	}
}
