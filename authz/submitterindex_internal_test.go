package authz

import (
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// storedEntry is an entry of the submitter index as stored, at its
// stream sequence.
type storedEntry struct {
	seq uint64
	records.SubmittedEntry
}

// indexEntries reads user's entries of the submitter index, oldest
// first, as admin.
func indexEntries(t *testing.T, p *parts, user string) []storedEntry {
	t.Helper()
	st, err := p.admin.Stream(p.ctx, streams.StreamSubmitted)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []storedEntry
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(p.ctx, seq)
		if err != nil || m.Subject != streams.SubmittedSubject(user) {
			continue // deleted, or another's
		}
		e, err := records.Decode[records.SubmittedEntry](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, storedEntry{seq: seq, SubmittedEntry: e})
	}
	return out
}

// writeEntry appends an entry of ids after the last of user's, as admin:
// another writer's, such as a replica that grouped several submissions.
func writeEntry(t *testing.T, p *parts, user string, ids ...uint64) uint64 {
	t.Helper()
	e := records.SubmittedEntry{IDs: ids}
	if es := indexEntries(t, p, user); len(es) > 0 {
		last := es[len(es)-1]
		e.Back = append([]uint64{last.seq}, last.Back[:min(len(last.Back), records.SubmittedBack-1)]...)
	}
	data, err := records.Encode(&e)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := p.admin.PublishMsg(p.ctx, &nats.Msg{Subject: streams.SubmittedSubject(user), Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// recorded records n batches of alice's, without tokens.
func recorded(t *testing.T, p *parts, n int) []*pipeline.Batch {
	t.Helper()
	var out []*pipeline.Batch
	for range n {
		out = append(out, p.recordOnly(t, p.batch(nil)))
	}
	return out
}

// listPage is one page of user's listing by si.
func listPage(t *testing.T, p *parts, si *submitterIndex, user string, req api.ListRequest) ([]uint64, uint64) {
	t.Helper()
	out, err := si.list(p.ctx, user, &req)
	if err != nil {
		t.Fatalf("list of %s (%+v): %v", user, req, err)
	}
	var ids []uint64
	for _, it := range out.(*api.ListReply).Items {
		ids = append(ids, it.ID)
	}
	return ids, out.(*api.ListReply).Next
}

func idsOf(bs ...*pipeline.Batch) []uint64 {
	var out []uint64
	for _, b := range bs {
		out = append(out, b.ID)
	}
	return out
}

// TestSubmitterIndexAppendsAndLists: each index call stores one entry on
// its submitter's subject, naming the entries before it newest first; the
// listing reads them back newest first. An id indexed without a record (a
// send refused after its index entry) and a batch of another's are not
// listed; the status filter and the owner's listing of another submitter
// read the same entries; a bad request is refused with a code that says
// so, and writes nothing.
func TestSubmitterIndexAppendsAndLists(t *testing.T) {
	p := newParts(t)
	si := p.submitters()
	bs := recorded(t, p, 3)
	bobs := p.recordOnly(t, p.batch(func(b *pipeline.Batch) { b.Domain, b.Label, b.Submitter = "ship", "parcels", "bob" }))
	const unrecorded = 1 << 50
	for _, id := range []uint64{bs[0].ID, unrecorded, bs[1].ID, bobs.ID, bs[2].ID} {
		if err := si.index(p.ctx, "alice", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := si.index(p.ctx, "bob", bobs.ID); err != nil {
		t.Fatal(err)
	}

	es := indexEntries(t, p, "alice")
	if len(es) != 5 {
		t.Fatalf("alice's index has %d entries, want 5: %+v", len(es), es)
	}
	for i, e := range es {
		var back []uint64
		for j := i - 1; j >= 0; j-- {
			back = append(back, es[j].seq)
		}
		if len(e.IDs) != 1 || !slices.Equal(e.Back, back) {
			t.Fatalf("entry %d: ids %v, back %v; want one id, back %v", i, e.IDs, e.Back, back)
		}
	}

	newest := []uint64{bs[2].ID, bs[1].ID, bs[0].ID}
	for _, tc := range []struct {
		name     string
		user     string
		req      api.ListRequest
		want     []uint64
		wantCode int
	}{
		{name: "newest first", user: "alice", want: newest},
		{name: "in pages of one", user: "alice", req: api.ListRequest{Limit: 1}, want: newest[:1]},
		{name: "in process", user: "alice", req: api.ListRequest{Status: pipeline.InProcess}, want: newest},
		{name: "executed", user: "alice", req: api.ListRequest{Status: pipeline.Executed}, want: nil},
		{name: "the owner lists alice's", user: DefaultOwner, req: api.ListRequest{Submitter: "alice"}, want: newest},
		{name: "alice names herself", user: "alice", req: api.ListRequest{Submitter: "alice"}, want: newest},
		{name: "bob's own", user: "bob", want: []uint64{bobs.ID}},
		{name: "nothing indexed", user: "carol", want: nil},
		{name: "bob lists alice's", user: "bob", req: api.ListRequest{Submitter: "alice"}, wantCode: api.CodeForbidden},
		{name: "a submitter that is no user name", user: DefaultOwner, req: api.ListRequest{Submitter: "a.b"}, wantCode: api.CodeBadRequest},
		{name: "an unknown status", user: "alice", req: api.ListRequest{Status: "lost"}, wantCode: api.CodeBadRequest},
		{name: "a limit past the most", user: "alice", req: api.ListRequest{Limit: api.MaxListLimit + 1}, wantCode: api.CodeBadRequest},
		{name: "a cursor at sequence 0", user: "alice", req: api.ListRequest{Before: entryCursor(0, 1)}, wantCode: api.CodeBadRequest},
		{name: "a cursor past an entry's group", user: "alice", req: api.ListRequest{Before: entryCursor(es[0].seq, records.SubmittedGroup+1)}, wantCode: api.CodeBadRequest},
		{name: "a cursor at bob's entry", user: "alice", req: api.ListRequest{Before: entryCursor(es[len(es)-1].seq+1, restAll)}, wantCode: api.CodeBadRequest},
		{name: "a cursor past the stream", user: "alice", req: api.ListRequest{Before: entryCursor(1000, restAll)}, wantCode: api.CodeBadRequest},
	} {
		out, err := si.list(p.ctx, tc.user, &tc.req)
		if codeOf(err) != tc.wantCode {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.wantCode)
		}
		if err != nil {
			continue
		}
		var got []uint64
		for _, it := range out.(*api.ListReply).Items {
			got = append(got, it.ID)
		}
		if !slices.Equal(got, tc.want) {
			t.Fatalf("%s: listed %v, want %v", tc.name, got, tc.want)
		}
	}
	if n := len(indexEntries(t, p, "alice")); n != 5 {
		t.Fatalf("alice's index has %d entries after the listings, want 5", n)
	}
}

// TestSubmitterIndexLosesTheTailToAnotherReplica: a replica appends after
// the entry it wrote last; when another replica appended since, its
// compare-and-set on the subject's last sequence loses, and it reads the
// last entry and appends after that one: the chain of entries names every
// one, and the loser reads the tail before its writes for a while. A try
// repeated after its write was stored (its answer lost) is answered as a
// duplicate and stores nothing.
func TestSubmitterIndexLosesTheTailToAnotherReplica(t *testing.T) {
	p := newParts(t)
	one, two := p.submitters(), p.submittersOver(p.replica(t))
	bs := recorded(t, p, 4)
	for i, si := range []*submitterIndex{one, two, one} {
		if err := si.index(p.ctx, "alice", bs[i].ID); err != nil {
			t.Fatal(err)
		}
	}
	es := indexEntries(t, p, "alice")
	if len(es) != 3 {
		t.Fatalf("%d entries, want 3: %+v", len(es), es)
	}
	if !slices.Equal(es[2].IDs, []uint64{bs[2].ID}) || !slices.Equal(es[2].Back, []uint64{es[1].seq, es[0].seq}) {
		t.Fatalf("the loser's entry: ids %v, back %v; want [%d] after [%d %d]", es[2].IDs, es[2].Back, bs[2].ID, es[1].seq, es[0].seq)
	}
	one.marks.mu.Lock()
	l := one.marks.users["alice"]
	one.marks.mu.Unlock()
	if !l.contended.After(p.clock.Now()) {
		t.Fatalf("the loser trusts its own tail again at once (contended until %v, now %v)", l.contended, p.clock.Now())
	}

	// The same entry tried again, from a replica that does not know it
	// was stored.
	if err := two.appendIndex("alice", &indexLog{}, []uint64{bs[2].ID}); err != nil {
		t.Fatal(err)
	}
	if n := len(indexEntries(t, p, "alice")); n != 3 {
		t.Fatalf("a repeated write stored a second entry: %d entries, want 3", n)
	}
	if err := two.index(p.ctx, "alice", bs[3].ID); err != nil {
		t.Fatal(err)
	}
	want := newestFirst(idsOf(bs...))
	for _, si := range []*submitterIndex{one, two} {
		if got, next := listPage(t, p, si, "alice", api.ListRequest{}); !slices.Equal(got, want) || next != 0 {
			t.Fatalf("listed %v (next %d), want %v", got, next, want)
		}
	}
}

// TestIndexReaderResumesFromItsCursor: a listing goes on from the cursor
// of the page before, in another replica (a restart), after another
// writer appended entries: the pages from the cursor list what was older
// than it, each once, the batches inside a grouped entry included, and
// stop at the index's start; the newest page shows the new entries. An
// entry deleted by hand is skipped, with the entries read beside it still
// listed; a cursor at it is refused.
func TestIndexReaderResumesFromItsCursor(t *testing.T) {
	p := newParts(t)
	si := p.submitters()
	bs := recorded(t, p, 8)
	for _, b := range bs[:2] {
		if err := si.index(p.ctx, "alice", b.ID); err != nil {
			t.Fatal(err)
		}
	}
	grouped := writeEntry(t, p, "alice", bs[2].ID, bs[3].ID, bs[4].ID)
	if err := si.index(p.ctx, "alice", bs[5].ID); err != nil {
		t.Fatal(err)
	}

	first, next := listPage(t, p, si, "alice", api.ListRequest{Limit: 2})
	if !slices.Equal(first, idsOf(bs[5], bs[4])) || next != entryCursor(grouped, 2) {
		t.Fatalf("first page %v, next %d; want %v, next %d (inside the grouped entry)", first, next, idsOf(bs[5], bs[4]), entryCursor(grouped, 2))
	}
	// Another writer appends; another replica goes on from the cursor.
	writeEntry(t, p, "alice", bs[6].ID)
	if err := si.index(p.ctx, "alice", bs[7].ID); err != nil {
		t.Fatal(err)
	}
	restarted := p.submittersOver(p.replica(t))
	var rest []uint64
	for pages := 0; next != 0; pages++ {
		if pages == 10 {
			t.Fatalf("no end of pages after %v", rest)
		}
		var ids []uint64
		ids, next = listPage(t, p, restarted, "alice", api.ListRequest{Limit: 1, Before: next})
		rest = append(rest, ids...)
	}
	if want := idsOf(bs[3], bs[2], bs[1], bs[0]); !slices.Equal(rest, want) {
		t.Fatalf("from the cursor: %v, want %v", rest, want)
	}
	if got, _ := listPage(t, p, restarted, "alice", api.ListRequest{}); !slices.Equal(got, newestFirst(idsOf(bs...))) {
		t.Fatalf("newest page %v, want %v", got, newestFirst(idsOf(bs...)))
	}

	// The grouped entry deleted by hand: its batches are out of reach; the
	// entries before it, read with it, are still listed.
	st, err := p.admin.Stream(p.ctx, streams.StreamSubmitted)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(p.ctx, grouped); err != nil {
		t.Fatal(err)
	}
	want := idsOf(bs[7], bs[6], bs[5], bs[1], bs[0])
	if got, next := listPage(t, p, restarted, "alice", api.ListRequest{}); !slices.Equal(got, want) || next != 0 {
		t.Fatalf("with an entry deleted: %v (next %d), want %v", got, next, want)
	}
	if _, err := restarted.list(p.ctx, "alice", &api.ListRequest{Before: entryCursor(grouped, 2)}); codeOf(err) != api.CodeBadRequest {
		t.Fatalf("a cursor at the deleted entry: %v, want a 400", err)
	}

	// The reader alone: from the last entry's sequences, fill reads
	// entries at most n at a time until n ids are found.
	es := indexEntries(t, p, "alice")
	last := es[len(es)-1]
	r := &indexReader{acks: p.h.acks, user: "alice"}
	r.add(last.seq, &last.SubmittedEntry, restAll)
	if err := r.fill(p.ctx, 3); err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, it := range r.ids {
		got = append(got, it.id)
	}
	if !slices.Equal(got, idsOf(bs[7], bs[6], bs[5])) || r.reads != 2 || r.ids[2].next != entryCursor(grouped, restAll) {
		t.Fatalf("fill(3): ids %v after %d reads, last next %d; want %v after 2 reads", got, r.reads, r.ids[len(r.ids)-1].next, idsOf(bs[7], bs[6], bs[5]))
	}
	// Bob's reader finds none of alice's entries at her sequences.
	other := &indexReader{acks: p.h.acks, user: "bob", older: []uint64{last.seq, es[0].seq}}
	if err := other.fill(p.ctx, 5); err != nil || len(other.ids) != 0 {
		t.Fatalf("bob's reader at alice's entries: %v, %v; want nothing", other.ids, err)
	}
}
