package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// queueEditor builds the queue editor over p, on the parts it calls.
func (p *parts) queueEditor() *queueEditor {
	ko := p.keyOrders()
	return &queueEditor{js: p.js, locks: p.h.locks, state: p.h.state, queues: p.h.queues, progress: p.progress, store: p.store,
		inspect: p.inspector(ko), scheduled: ko.scheduled, removal: ko.removal, table: p.Table, now: p.clock.Now, log: p.log,
		build: p.intake(ko).build, admit: ko.admit}
}

// liveIDs lists the ids of pay's med queue, in order.
func liveIDs(t *testing.T, p *parts, qe *queueEditor) []uint64 {
	t.Helper()
	return queueIDs(p.ctx, t, qe, pipeline.Med)
}

// queued enqueues n batches of alice's in pay's med queue.
func queued(t *testing.T, p *parts, n int) []*pipeline.Batch {
	t.Helper()
	var out []*pipeline.Batch
	for range n {
		out = append(out, p.enqueue(t, p.batch(nil)))
	}
	return out
}

// TestQueueEditorListsAndEvicts: the listing shows a domain's live tokens
// in order, in the range asked (another domain's left out); a range or
// position outside it, a bad domain or priority, is refused with a code
// that says so. An evicted batch is Done as RemovedByOwner, its token is
// gone, its callback published, and the others keep their places.
func TestQueueEditorListsAndEvicts(t *testing.T) {
	p := newParts(t)
	qe := p.queueEditor()
	bs := queued(t, p, 3)
	p.enqueue(t, p.batch(func(b *pipeline.Batch) {
		b.Domain, b.Label, b.Submitter, b.Priority = "ship", "parcels", "bob", pipeline.High
	}))

	for _, tc := range []struct {
		name     string
		req      api.QueueRequest
		want     []uint64
		wantCode int
	}{
		{name: "all", req: api.QueueRequest{Domain: "pay", Priority: pipeline.Med}, want: []uint64{bs[0].ID, bs[1].ID, bs[2].ID}},
		{name: "a range", req: api.QueueRequest{Domain: "pay", Priority: pipeline.Med, From: 1, To: 2}, want: []uint64{bs[1].ID}},
		{name: "to past the end", req: api.QueueRequest{Domain: "pay", Priority: pipeline.Med, From: 2, To: 9}, want: []uint64{bs[2].ID}},
		{name: "empty queue", req: api.QueueRequest{Domain: "pay", Priority: pipeline.High}, want: nil},
		{name: "from after to", req: api.QueueRequest{Domain: "pay", Priority: pipeline.Med, From: 2, To: 1}, wantCode: api.CodeOutOfBounds},
		{name: "negative from", req: api.QueueRequest{Domain: "pay", Priority: pipeline.Med, From: -1}, wantCode: api.CodeOutOfBounds},
		{name: "bad domain", req: api.QueueRequest{Domain: "pay.x", Priority: pipeline.Med}, wantCode: api.CodeBadRequest},
		{name: "bad priority", req: api.QueueRequest{Domain: "pay", Priority: "urgent"}, wantCode: api.CodeBadRequest},
	} {
		out, err := qe.queue(p.ctx, DefaultOwner, &tc.req)
		if codeOf(err) != tc.wantCode {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.wantCode)
		}
		if err != nil {
			continue
		}
		rep := out.(*api.QueueReply)
		var ids []uint64
		for _, it := range rep.Items {
			ids = append(ids, it.ID)
		}
		if !slices.Equal(ids, tc.want) || rep.Items == nil || rep.Scheduled == nil {
			t.Fatalf("%s: items %v (nil %v), scheduled nil %v; want %v", tc.name, ids, rep.Items == nil, rep.Scheduled == nil, tc.want)
		}
	}

	out, err := qe.evict(p.ctx, DefaultOwner, &api.PositionRequest{Domain: "pay", Priority: pipeline.Med, Position: 1})
	if err != nil || out.(*api.EvictReply).ID != bs[1].ID {
		t.Fatalf("evict position 1: %v, %v; want batch %d", out, err, bs[1].ID)
	}
	if !p.removedBy(t, bs[1]) || len(p.tokens(t, pipeline.Med, bs[1].ID)) != 0 {
		t.Fatalf("evicted batch: progress %+v, callbacks %+v, tokens %v", p.loadProgress(t, bs[1]), p.callbacks(t, bs[1].ID), p.tokens(t, pipeline.Med, bs[1].ID))
	}
	if got := liveIDs(t, p, qe); !slices.Equal(got, []uint64{bs[0].ID, bs[2].ID}) {
		t.Fatalf("queue after the evict: %v", got)
	}
	for _, pos := range []int{2, -1} {
		if _, err := qe.evict(p.ctx, DefaultOwner, &api.PositionRequest{Domain: "pay", Priority: pipeline.Med, Position: pos}); codeOf(err) != api.CodeOutOfBounds {
			t.Fatalf("evict position %d of 2: %v, want %d", pos, err, api.CodeOutOfBounds)
		}
	}
}

// TestQueueEditorInsertMovesTheTail: an insert queues the new batch at its
// position and moves every batch behind it to the back with its next
// generation, each with one token left, and clears its edit record; a
// batch in front keeps its token. An insert the table does not allow, or
// at a position outside the queue, records nothing.
func TestQueueEditorInsertMovesTheTail(t *testing.T) {
	p := newParts(t)
	qe := p.queueEditor()
	bs := queued(t, p, 3)

	for _, tc := range []struct {
		name     string
		req      api.InsertRequest
		wantCode int
	}{
		{name: "unknown label", req: api.InsertRequest{Domain: "pay", Priority: pipeline.Med, Label: "nope", Functions: []api.CallSpec{{Type: "noop"}}}, wantCode: api.CodeNotFound},
		{name: "another domain's label", req: api.InsertRequest{Domain: "pay", Priority: pipeline.Med, Label: "parcels", Functions: []api.CallSpec{{Type: "noop"}}}, wantCode: api.CodeBadRequest},
		{name: "a type the domain lacks", req: api.InsertRequest{Domain: "pay", Priority: pipeline.Med, Label: "jobs", Functions: []api.CallSpec{{Type: "ledger.transfer"}}}, wantCode: api.CodeBadRequest},
		{name: "past the end", req: api.InsertRequest{Domain: "pay", Priority: pipeline.Med, Label: "jobs", Position: 4, Functions: []api.CallSpec{{Type: "noop"}}}, wantCode: api.CodeOutOfBounds},
	} {
		if _, err := qe.insert(p.ctx, DefaultOwner, &tc.req); codeOf(err) != tc.wantCode {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.wantCode)
		}
	}
	if n := countRecords(t, p); n != 3 {
		t.Fatalf("refused inserts left %d records, want the 3 queued", n)
	}

	out, err := qe.insert(p.ctx, DefaultOwner, &api.InsertRequest{Domain: "pay", Priority: pipeline.Med, Label: "jobs", Position: 1, Functions: []api.CallSpec{{Type: "noop"}}})
	if err != nil {
		t.Fatal(err)
	}
	rep := out.(*api.InsertReply)
	if rep.Position != 1 || rep.WaitsForKey {
		t.Fatalf("insert reply %+v", rep)
	}
	if got, want := liveIDs(t, p, qe), []uint64{bs[0].ID, rep.ID, bs[1].ID, bs[2].ID}; !slices.Equal(got, want) {
		t.Fatalf("queue after the insert: %v, want %v", got, want)
	}
	if rec := p.record(t, rep.ID); rec.Batch.Submitter != DefaultOwner || rec.Status != pipeline.InProcess {
		t.Fatalf("inserted batch's record: submitter %q, status %s", rec.Batch.Submitter, rec.Status)
	}
	for i, b := range bs {
		wantGen := uint32(1)
		if i == 0 {
			wantGen = 0
		}
		if toks := p.tokens(t, pipeline.Med, b.ID); len(toks) != 1 || toks[0][0] != wantGen || p.loadProgress(t, b).Gen != wantGen {
			t.Fatalf("batch %d (position %d before): tokens %v, progress generation %d; want one token of generation %d", b.ID, i, toks, p.loadProgress(t, b).Gen, wantGen)
		}
	}
	if _, err := p.h.locks.Get(p.ctx, streams.EditKey("pay", pipeline.Med)); err == nil {
		t.Fatal("the edit record was left behind")
	}
}

// countRecords counts the batch records in the batches bucket.
func countRecords(t *testing.T, p *parts) int {
	t.Helper()
	n := 0
	keys, err := p.h.batches.ListKeys(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range keys.Keys() {
		if _, err := strconv.ParseUint(k, 10, 64); err == nil {
			n++ // a batch record (streams.BatchKey)
		}
	}
	return n
}

// TestQueueEditorResumesAHalfDoneEdit: an insert whose replica died after
// its edit record, with one tail batch moved already (its generation
// bumped and its new token published, its old one left), is finished by
// resumeEdits: the new batch is queued first, each tail batch ends with
// one live token, its generation bumped once, not twice, and the edit
// record is gone. A second resume finds nothing to do.
func TestQueueEditorResumesAHalfDoneEdit(t *testing.T) {
	p := newParts(t)
	qe := p.queueEditor()
	bs := queued(t, p, 3)
	items, err := qe.live(p.ctx, "pay", pipeline.Med)
	if err != nil {
		t.Fatal(err)
	}
	n := p.recordOnly(t, p.batch(nil))
	e := &edit{Domain: "pay", Priority: pipeline.Med, New: n.ID, Tail: items[1:]}
	data, _ := json.Marshal(e)
	if _, err := p.h.locks.Create(p.ctx, streams.EditKey("pay", pipeline.Med), data); err != nil {
		t.Fatal(err)
	}
	// The dead replica had queued the new batch and moved the first tail
	// batch, all but deleting its old token.
	if _, err := qe.admit(p.ctx, n, true, 0); err != nil {
		t.Fatal(err)
	}
	st := p.loadProgress(t, bs[1])
	st.Gen++
	if err := p.progress.Save(p.ctx, "pay", st); err != nil {
		t.Fatal(err)
	}
	if err := qe.moveToBack(p.ctx, "pay", items[1]); err != nil {
		t.Fatal(err)
	}

	for range 2 {
		if err := qe.resumeEdits(p.ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := liveIDs(t, p, qe), []uint64{bs[0].ID, n.ID, bs[1].ID, bs[2].ID}; !slices.Equal(got, want) {
			t.Fatalf("queue after the resume: %v, want %v", got, want)
		}
		for _, b := range bs[1:] {
			if toks, gen := p.tokens(t, pipeline.Med, b.ID), p.loadProgress(t, b).Gen; len(toks) != 1 || toks[0][0] != 1 || gen != 1 {
				t.Fatalf("tail batch %d: tokens %v, progress generation %d; want one token of generation 1", b.ID, toks, gen)
			}
		}
		if _, err := p.h.locks.Get(p.ctx, streams.EditKey("pay", pipeline.Med)); err == nil {
			t.Fatal("the edit record was left behind")
		}
	}
}

// insertMeanwhile inserts a noop batch at the front of pay's med queue,
// running meanwhile once the batch is recorded and before the edit record
// is written, and returns the batch recorded and the insert's error.
func insertMeanwhile(t *testing.T, p *parts, qe *queueEditor, meanwhile func(ctx context.Context)) (*pipeline.Batch, error) {
	t.Helper()
	var mine *pipeline.Batch
	build := qe.build
	qe.build = func(ctx context.Context, sub *submission) (*built, error) {
		b, err := build(ctx, sub)
		if err == nil {
			mine = b.batch
			meanwhile(ctx)
		}
		return b, err
	}
	_, err := qe.insert(p.ctx, DefaultOwner, &api.InsertRequest{Domain: "pay", Priority: pipeline.Med, Label: "jobs", Functions: []api.CallSpec{{Type: "noop"}}})
	if mine == nil {
		t.Fatalf("the insert recorded no batch: %v", err)
	}
	return mine, err
}

// wantWithdrawn fails t unless the batch an insert recorded is finished as
// removed, with no token.
func wantWithdrawn(t *testing.T, p *parts, b *pipeline.Batch) {
	t.Helper()
	if !p.removedBy(t, b) || len(p.tokens(t, pipeline.Med, b.ID)) != 0 {
		t.Fatalf("the refused insert's batch %d: progress %+v, callbacks %+v; want it finished as removed", b.ID, p.loadProgress(t, b), p.callbacks(t, b.ID))
	}
}

// TestQueueEditorInsertLosesTheEditRecord: an insert that finds another
// replica's edit of the queue in progress, after it recorded its batch,
// answers 409 and leaves the other's edit record alone; the batch it
// recorded is not left InProcess with no token, for ever: it is finished
// as RemovedByOwner, its callback published.
func TestQueueEditorInsertLosesTheEditRecord(t *testing.T) {
	p := newParts(t)
	qe := p.queueEditor()
	queued(t, p, 1)
	other := []byte(`{"domain":"pay","priority":"med","new":1}`)
	mine, err := insertMeanwhile(t, p, qe, func(ctx context.Context) {
		// Another replica's insert takes the queue meanwhile.
		if _, err := p.h.locks.Create(ctx, streams.EditKey("pay", pipeline.Med), other); err != nil {
			t.Error(err)
		}
	})
	if codeOf(err) != api.CodeConflict {
		t.Fatalf("insert during another's edit: %v, want %d", err, api.CodeConflict)
	}
	if e, err := p.h.locks.Get(p.ctx, streams.EditKey("pay", pipeline.Med)); err != nil || string(e.Value()) != string(other) {
		t.Fatalf("the other's edit record: %v", err)
	}
	wantWithdrawn(t, p, mine)
}

// TestQueueEditorInsertEditRecordRefused: an edit record the server
// refuses (here: larger than the bucket takes) leaves no batch recorded
// and never queued; the insert answers an error naming it, and the batch
// is finished as removed.
func TestQueueEditorInsertEditRecordRefused(t *testing.T) {
	p := newParts(t)
	qe := p.queueEditor()
	queued(t, p, 1)
	locks, err := p.admin.Stream(p.ctx, "KV_"+streams.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := locks.CachedInfo().Config
	mine, err := insertMeanwhile(t, p, qe, func(ctx context.Context) {
		small := cfg
		small.MaxMsgSize = 16
		if _, err := p.admin.UpdateStream(ctx, small); err != nil {
			t.Error(err)
		}
	})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("batch %d is not queued, and is recorded as removed", mine.ID)) {
		t.Fatalf("insert whose edit record is refused: %v", err)
	}
	if _, err := p.admin.UpdateStream(p.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := p.h.locks.Get(p.ctx, streams.EditKey("pay", pipeline.Med)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("edit record after the refused insert: %v, want none", err)
	}
	wantWithdrawn(t, p, mine)
}

// TestQueueEditorPauseAndResume: pause and resume write the domain's
// state, saying who and when; a bad domain is refused and writes nothing.
func TestQueueEditorPauseAndResume(t *testing.T) {
	p := newParts(t)
	qe := p.queueEditor()
	for _, tc := range []struct {
		name   string
		pause  bool
		domain string
		code   int
	}{
		{name: "pause", pause: true, domain: "pay"},
		{name: "resume", domain: "pay"},
		{name: "pause again", pause: true, domain: "pay"},
		{name: "bad domain", pause: true, domain: "pay.>", code: api.CodeBadRequest},
	} {
		set := qe.resume
		if tc.pause {
			set = qe.pause
		}
		_, err := set(p.ctx, DefaultOwner, &api.DomainRequest{Domain: tc.domain})
		if codeOf(err) != tc.code {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.code)
		}
		if tc.code != 0 {
			continue
		}
		e, err := p.h.state.Get(p.ctx, tc.domain)
		if err != nil {
			t.Fatal(err)
		}
		st, err := records.DecodeDomainState(e.Value())
		if err != nil || st.Paused != tc.pause || st.By != DefaultOwner || !st.At.Equal(p.clock.Now()) {
			t.Fatalf("%s: state %+v, %v", tc.name, st, err)
		}
	}
	kv, err := p.admin.KeyValue(p.ctx, streams.BucketDomainStates)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(p.ctx)
	if err != nil || !slices.Equal(keys, []string{"pay"}) {
		t.Fatalf("state keys %v, %v; want only pay's", keys, err)
	}
}
