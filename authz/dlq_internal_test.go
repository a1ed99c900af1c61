package authz

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/pipeline"
)

// deadLetters builds the dead-letter part over p, on the parts it calls.
func (p *parts) deadLetters() *deadLetters {
	ko := p.keyOrders()
	ca := p.callbackApplier(ko)
	return &deadLetters{js: p.js, nc: p.nc, dlq: p.h.dlq, batches: p.h.batches, store: p.store, submitters: p.submitters(),
		table: p.Table, now: p.clock.Now, log: p.log, admit: ko.admit,
		apply: func(ctx context.Context, cb *records.Callback) error { _, err := ca.apply(ctx, cb); return err }}
}

// publishDeadLetter publishes dl on its domain's DLQ subject, as a processor
// does, and returns its sequence.
func publishDeadLetter(t *testing.T, p *parts, dl *records.DeadLetter) uint64 {
	t.Helper()
	data, err := records.Encode(dl)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(streams.DLQSubject(dl.Domain))
	m.Data = data
	ack, err := p.env.JS(t, "processor").PublishMsg(p.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// failed dead-letters batch b as the processor that failed it would.
func failed(t *testing.T, p *parts, b *pipeline.Batch) uint64 {
	t.Helper()
	return publishDeadLetter(t, p, &records.DeadLetter{Batch: *b, Domain: b.Domain, Error: "boom", Attempts: 3,
		Outcome: pipeline.RejectedOutcome("boom"), At: p.clock.Now(), Origin: records.Origin{Stream: streams.QueueStream(b.Priority)}})
}

// replayedEvents counts the "replayed" events of batch id's record.
func replayedEvents(t *testing.T, p *parts, id uint64) int {
	t.Helper()
	return len(slices.DeleteFunc(p.record(t, id).History, func(e records.Event) bool { return e.What != "replayed" }))
}

// TestDeadLettersReplayBatch: the listing shows a domain's dead letters
// (an undecodable one skipped); a replay queues the batch again as a new
// one linked both ways, and records the replay; replayed again, by
// sequence or with all, it gives the same batch and queues nothing more.
// A dead letter that does not exist, or a request that names none, is
// refused.
func TestDeadLettersReplayBatch(t *testing.T) {
	p := newParts(t)
	dq := p.deadLetters()
	b := queued(t, p, 1)[0]
	seq := failed(t, p, b)
	m := nats.NewMsg(streams.DLQSubject("pay"))
	m.Data = []byte("not a dead letter")
	if _, err := p.env.JS(t, "processor").PublishMsg(p.ctx, m); err != nil {
		t.Fatal(err)
	}
	failed(t, p, p.enqueue(t, p.batch(func(b *pipeline.Batch) {
		b.Domain, b.Label, b.Submitter, b.Priority = "ship", "parcels", "bob", pipeline.High
	})))
	list := func(domain string) []api.DeadLetterItem {
		t.Helper()
		out, err := dq.list(p.ctx, DefaultOwner, &api.DLQRequest{Domain: domain})
		if err != nil {
			t.Fatal(err)
		}
		return out.(*api.DLQReply).Items
	}
	if items := list("pay"); len(items) != 1 || items[0].Seq != seq || items[0].BatchID != b.ID || items[0].ReplayedAs != 0 || items[0].Error != "boom" {
		t.Fatalf("pay's dead letters: %+v", items)
	}
	if items := list(""); len(items) != 2 {
		t.Fatalf("every dead letter: %+v, want 2", items)
	}

	var replayID uint64
	for _, tc := range []struct {
		name     string
		req      api.ReplayRequest
		want     int // dead letters replayed
		wantCode int
	}{
		{name: "by sequence", req: api.ReplayRequest{Seq: seq}, want: 1},
		{name: "again", req: api.ReplayRequest{Seq: seq}, want: 1},
		{name: "all of pay's, replayed already", req: api.ReplayRequest{Domain: "pay", All: true}},
		{name: "no such sequence", req: api.ReplayRequest{Seq: seq + 100}, wantCode: api.CodeNotFound},
		{name: "names none", req: api.ReplayRequest{Domain: "pay"}, wantCode: api.CodeBadRequest},
	} {
		out, err := dq.replay(p.ctx, DefaultOwner, &tc.req)
		if codeOf(err) != tc.wantCode {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.wantCode)
		}
		if err != nil {
			continue
		}
		got := out.(*api.ReplayReply).Replayed
		if len(got) != tc.want {
			t.Fatalf("%s: replayed %+v, want %d", tc.name, got, tc.want)
		}
		for _, r := range got {
			if replayID == 0 {
				replayID = r.AsNew
			}
			if r.Seq != seq || r.From != b.ID || r.AsNew != replayID || r.AsNew == b.ID {
				t.Fatalf("%s: replayed %+v; want dead letter %d of batch %d as batch %d", tc.name, r, seq, b.ID, replayID)
			}
		}
	}
	rec := p.record(t, replayID)
	if rec.Batch.ReplayOf != b.ID || rec.Status != pipeline.InProcess || rec.Batch.Submitter != "alice" {
		t.Fatalf("replay's record: replay of %d, %s, submitter %q", rec.Batch.ReplayOf, rec.Status, rec.Batch.Submitter)
	}
	if toks := p.tokens(t, pipeline.Med, replayID); len(toks) != 1 {
		t.Fatalf("replay's tokens %v, want one", toks)
	}
	if orig := p.record(t, b.ID); orig.ReplayedAs != replayID || replayedEvents(t, p, b.ID) != 1 {
		t.Fatalf("original: replayed as %d, %d replayed events", orig.ReplayedAs, replayedEvents(t, p, b.ID))
	}
	rr, _, err := dq.replayed(p.ctx, seq)
	if err != nil || rr == nil || *rr != (replayRecord{ID: replayID, Queued: true}) {
		t.Fatalf("replay record %+v, %v", rr, err)
	}
	if items := list("pay"); items[0].ReplayedAs != replayID {
		t.Fatalf("listed after the replay: %+v", items[0])
	}
}

// TestDeadLettersReplayRefusedOrFinished: a dead letter whose function
// type the domain no longer allows is refused before anything is
// assigned or recorded; a replay cut short after its replay record (a
// replica died before the batch was recorded) is finished by the next,
// with the id it had taken.
func TestDeadLettersReplayRefusedOrFinished(t *testing.T) {
	p := newParts(t)
	dq := p.deadLetters()
	b := queued(t, p, 1)[0]
	stale := *b
	stale.Functions = []pipeline.Function{{Type: "ledger.transfer"}}
	refused := failed(t, p, &stale)
	if _, err := dq.replay(p.ctx, DefaultOwner, &api.ReplayRequest{Seq: refused}); codeOf(err) != api.CodeBadRequest {
		t.Fatalf("replay of a type pay no longer allows: %v, want %d", err, api.CodeBadRequest)
	}
	if _, err := p.h.batches.Get(p.ctx, streams.ReplayKey(refused)); err == nil {
		t.Fatal("a refused replay left a replay record")
	}

	seq := failed(t, p, b)
	id, _, err := submit.AssignID(p.ctx, p.js, "")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := json.Marshal(replayRecord{ID: id})
	if _, err := p.h.batches.Create(p.ctx, streams.ReplayKey(seq), v); err != nil {
		t.Fatal(err)
	}
	out, err := dq.replay(p.ctx, DefaultOwner, &api.ReplayRequest{Seq: seq})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*api.ReplayReply).Replayed; len(got) != 1 || got[0].AsNew != id {
		t.Fatalf("finished replay: %+v, want batch %d", got, id)
	}
	if rec := p.record(t, id); rec.Batch.ReplayOf != b.ID || len(p.tokens(t, pipeline.Med, id)) != 1 {
		t.Fatalf("finished replay's batch: replay of %d, tokens %v", rec.Batch.ReplayOf, p.tokens(t, pipeline.Med, id))
	}
	if rr, _, err := dq.replayed(p.ctx, seq); err != nil || rr == nil || !rr.Queued {
		t.Fatalf("replay record after the finish: %+v, %v", rr, err)
	}
}

// TestDeadLettersReplayCallback: a dead-lettered callback, its message
// gone from CALLBACKS, is applied again from the bytes its dead letter
// kept: the batch keeps its id and finishes. A group refused whole on one
// domain's subject that holds another domain's callback is refused whole
// (nothing applied); one gone and never read is a 404.
func TestDeadLettersReplayCallback(t *testing.T) {
	p := newParts(t)
	dq := p.deadLetters()
	bs := queued(t, p, 2)
	gone := records.Origin{Stream: streams.StreamCallbacks, Subject: streams.CallbackSubject("pay"), Seq: 1 << 40}
	cb := &records.Callback{V: 1, BatchID: bs[0].ID, Domain: "pay", Priority: pipeline.Med, Processor: "p1", Outcome: pipeline.ExecutedOutcome(1), Attempts: 1, At: p.clock.Now()}
	data, err := records.Encode(cb)
	if err != nil {
		t.Fatal(err)
	}
	one := publishDeadLetter(t, p, &records.DeadLetter{Batch: pipeline.Batch{ID: bs[0].ID, Domain: "pay", Priority: pipeline.Med}, Domain: "pay",
		Outcome: cb.Outcome, At: cb.At, Origin: gone, Callback: data})

	theirs := *cb
	theirs.BatchID = bs[1].ID
	g, err := streams.CallbackGroupMsg("ship", []records.Callback{theirs, theirs})
	if err != nil {
		t.Fatal(err)
	}
	crossed := publishDeadLetter(t, p, &records.DeadLetter{Domain: "ship", At: cb.At,
		Origin: records.Origin{Stream: streams.StreamCallbacks, Subject: streams.CallbackSubject("ship"), Seq: 1 << 40}, Callback: g.Data})
	unread := publishDeadLetter(t, p, &records.DeadLetter{Batch: pipeline.Batch{ID: bs[1].ID, Domain: "pay"}, Domain: "pay", Origin: gone})

	out, err := dq.replay(p.ctx, DefaultOwner, &api.ReplayRequest{Seq: one})
	if err != nil {
		t.Fatal(err)
	}
	if got := out.(*api.ReplayReply).Replayed; len(got) != 1 || got[0].AsNew != bs[0].ID {
		t.Fatalf("replayed callback: %+v, want batch %d kept", got, bs[0].ID)
	}
	if rec := p.record(t, bs[0].ID); rec.Status != pipeline.Executed {
		t.Fatalf("batch of the replayed callback: %s", rec.Status)
	}
	for _, tc := range []struct {
		name string
		seq  uint64
		code int
	}{
		{name: "another domain's callback in the group", seq: crossed, code: api.CodeConflict},
		{name: "gone and never read", seq: unread, code: api.CodeNotFound},
	} {
		if _, err := dq.replay(p.ctx, DefaultOwner, &api.ReplayRequest{Seq: tc.seq}); codeOf(err) != tc.code {
			t.Fatalf("%s: %v, want %d", tc.name, err, tc.code)
		}
		if rec := p.record(t, bs[1].ID); rec.Status != pipeline.InProcess {
			t.Fatalf("%s: batch %d is %s, want it untouched", tc.name, bs[1].ID, rec.Status)
		}
	}
}
