package authz_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

func TestPauseResume(t *testing.T) {
	b := setup(t)
	id := b.send(t, "alice", "jobs", noop())
	var st api.StateReply
	if e := b.call(t, "owner", api.OpPause, api.DomainRequest{Domain: domain}, &st); e != nil || !st.Paused {
		t.Fatalf("pause: %+v %+v", e, st)
	}
	for range 3 {
		if rep := b.proc.Tick(b.ctx, 4); rep.Status != api.TickPaused {
			t.Fatalf("tick while paused: %+v", rep)
		}
	}
	if b.calls.get(key(id)) != 0 {
		t.Fatal("executed while paused")
	}
	if e := b.call(t, "owner", api.OpResume, api.DomainRequest{Domain: domain}, &st); e != nil || st.Paused {
		t.Fatalf("resume: %+v %+v", e, st)
	}
	if rec := b.settled(t, id); rec.Status != pipeline.Executed {
		t.Fatalf("after resume: %s", rec.Status)
	}
}

func TestCallbacksAppliedOnce(t *testing.T) {
	b := setup(t)
	id := b.send(t, "alice", "jobs", noop())
	rec := b.settled(t, id)
	if rec.Status != pipeline.Executed || rec.Attempts != 1 || rec.Outcome == nil {
		t.Fatalf("record %+v", rec)
	}
	// A second, conflicting callback for the same batch (past any
	// deduplication) changes nothing.
	dup := &records.Callback{BatchID: id, Domain: domain, Outcome: pipeline.RejectedOutcome("late"), Attempts: 9, At: time.Now()}
	data, _ := records.Encode(dup)
	js := b.env.JS(t, "admin")
	if _, err := js.Publish(b.ctx, streams.CallbackSubject(domain), data); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 5*time.Second, "callback consumed", func() bool {
		c, err := js.Consumer(b.ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(b.ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	again := b.record(t, id)
	if again.Status != pipeline.Executed || again.Attempts != 1 || len(again.History) != len(rec.History) {
		t.Fatalf("a repeated callback changed the record: %+v", again)
	}
}

// TestAppliedCallbacksAreRemoved: CALLBACKS holds a callback only until
// authz applied it, so the stream does not grow with the batches done;
// one authz has not applied yet stays (TestCallbacksWhileAuthzIsDown).
func TestAppliedCallbacksAreRemoved(t *testing.T) {
	b := setup(t)
	ids := []uint64{b.send(t, "alice", "jobs", noop()), b.send(t, "alice", "jobs", noop(), noop())}
	for _, id := range ids {
		if rec := b.settled(t, id); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d: %s", id, rec.Status)
		}
	}
	admin := b.env.JS(t, "admin")
	testnats.Eventually(t, 10*time.Second, "applied callbacks removed", func() bool {
		s, err := admin.Stream(b.ctx, streams.StreamCallbacks)
		if err != nil {
			t.Fatal(err)
		}
		// The two callbacks travel alone or together in one message (a
		// group): at least one message was stored, and none is left.
		st := s.CachedInfo().State
		return st.LastSeq >= 1 && st.Msgs == 0
	})
}

func TestCallbacksWhileAuthzIsDown(t *testing.T) {
	b := setup(t)
	ids := []uint64{b.send(t, "alice", "jobs", noop()), b.send(t, "alice", "transfer", noop())}
	b.stop()
	testnats.Eventually(t, 10*time.Second, "processor finishes both", func() bool {
		b.proc.Tick(b.ctx, 4)
		// Alone or together in one message (a group).
		return len(b.Callbacks(t)) == len(ids)
	})
	b.startAuthz(t)
	for _, id := range ids {
		if rec := b.settledRecord(t, id); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d: %s", id, rec.Status)
		}
	}
}

func TestDLQReplay(t *testing.T) {
	b := setup(t)
	id := b.send(t, "alice", "jobs", noop(), api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})})
	rec := b.settled(t, id)
	if rec.Status != pipeline.PartiallyExecuted || rec.DeadLetter == 0 {
		t.Fatalf("record %+v", rec)
	}
	var list api.DLQReply
	if e := b.call(t, "owner", api.OpDLQ, api.DLQRequest{Domain: domain}, &list); e != nil {
		t.Fatal(e)
	}
	if len(list.Items) != 1 || list.Items[0].BatchID != id || list.Items[0].Seq != rec.DeadLetter || list.Items[0].Error == "" {
		t.Fatalf("dlq %+v", list)
	}
	var rep api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: rec.DeadLetter}, &rep); e != nil {
		t.Fatal(e)
	}
	if len(rep.Replayed) != 1 || rep.Replayed[0].From != id || rep.Replayed[0].AsNew == 0 {
		t.Fatalf("replay %+v", rep)
	}
	newID := rep.Replayed[0].AsNew
	// Replaying the same dead letter again gives the same batch.
	var again api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: rec.DeadLetter}, &again); e != nil || again.Replayed[0].AsNew != newID {
		t.Fatalf("second replay %+v %+v", e, again)
	}
	nrec := b.settled(t, newID)
	if nrec.Batch.ReplayOf != id {
		t.Fatalf("replay not linked: %+v", nrec.Batch)
	}
	if n := b.calls.get(streams.BatchKey(newID) + "/1"); n != 1 {
		t.Fatalf("replayed batch ran its failing function %d times, want 1", n)
	}
	if orig := b.record(t, id); orig.ReplayedAs != newID {
		t.Fatalf("original not linked to its replay: %+v", orig)
	}
	// "all" skips what was replayed already.
	var all api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Domain: domain, All: true}, &all); e != nil {
		t.Fatal(e)
	}
	for _, r := range all.Replayed {
		if r.From == id {
			t.Fatalf("replayed twice: %+v", all)
		}
	}
}

// TestConfirmEndpoint: only callers who may know about a batch (the
// submitter, the owner, whoever may confirm one of its functions) learn why
// a confirmation is refused; anyone else gets exactly the answer a batch
// that does not exist gets.
func TestConfirmEndpoint(t *testing.T) {
	b := setup(t)
	id := b.send(t, "bob", "confirmed", api.CallSpec{Type: handlers.TypeNoop, Expect: "0xabc"},
		api.CallSpec{Type: handlers.TypeFlaky, Payload: pipeline.MustPayload(handlers.FlakyArgs{})})
	testnats.Eventually(t, 5*time.Second, "parked", func() bool {
		rep := b.proc.Tick(b.ctx, 1)
		return len(rep.Steps) == 1 && rep.Steps[0].Action == api.ActionParked
	})
	const unknown = 999999
	hidden := func(id uint64, index int) apiError {
		return apiError{Code: "404", Msg: fmt.Sprintf("authz: no batch %d with function %d waiting for your confirmation", id, index)}
	}
	tests := []struct {
		name  string
		user  string
		id    uint64
		index int
		want  apiError // Msg empty: any message
	}{
		{name: "unknown batch", user: "alice", id: unknown, want: hidden(unknown, 0)},
		{name: "unknown batch, allowed confirmer", user: "oracle", id: unknown, want: hidden(unknown, 0)},
		{name: "another's batch, a function alice may not confirm", user: "alice", id: id, want: hidden(id, 0)},
		{name: "another's batch, a function that takes no confirmation", user: "alice", id: id, index: 1, want: hidden(id, 1)},
		{name: "another's batch, no such function", user: "alice", id: id, index: 3, want: hidden(id, 3)},
		{name: "submitter, not an allowed confirmer", user: "bob", id: id, want: apiError{Code: "403",
			Msg: fmt.Sprintf(`authz: "bob" may not confirm function 0 of batch %d (allowed: [oracle])`, id)}},
		{name: "submitter, a function that takes no confirmation", user: "bob", id: id, index: 1, want: apiError{Code: "400",
			Msg: fmt.Sprintf("authz: function 1 of batch %d takes no confirmation", id)}},
		{name: "owner, not an allowed confirmer", user: "owner", id: id, want: apiError{Code: "403"}},
		{name: "owner, no such function", user: "owner", id: id, index: 3, want: apiError{Code: "400"}},
		{name: "allowed confirmer, a function that takes no confirmation", user: "oracle", id: id, index: 1, want: apiError{Code: "400"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := b.call(t, tt.user, "confirm", api.ConfirmRequest{ID: tt.id, Index: tt.index, Content: "0xabc"}, nil)
			if e == nil || e.Code != tt.want.Code || tt.want.Msg != "" && e.Msg != tt.want.Msg {
				t.Fatalf("got %+v, want %+v", e, tt.want)
			}
		})
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.proc.Run(ctx) }()
	t.Cleanup(func() { cancel(); testnats.Stopped(t, "authz", done) })
	if e := b.call(t, "oracle", api.OpConfirm, api.ConfirmRequest{ID: id, Content: "0xabc"}, nil); e != nil {
		t.Fatal(e)
	}
	if rec := b.settled(t, id); rec.Status != pipeline.Executed {
		t.Fatalf("after confirmation: %s", rec.Status)
	}
	// A finished batch: still hidden from alice, a conflict for the confirmer.
	if e := b.call(t, "alice", api.OpConfirm, api.ConfirmRequest{ID: id, Content: "0xabc"}, nil); e == nil || *e != hidden(id, 0) {
		t.Fatalf("alice on a finished batch: got %+v, want %+v", e, hidden(id, 0))
	}
	if e := b.call(t, "oracle", api.OpConfirm, api.ConfirmRequest{ID: id, Content: "0xabc"}, nil); e == nil || e.Code != "409" {
		t.Fatalf("oracle on a finished batch: got %+v, want 409", e)
	}
}

// TestEditsWhileTicking edits the queue while a processor drains it: every
// batch still reaches exactly one terminal outcome, applied once, and
// nothing is lost. A batch moved while its first token was being run may
// have its callback stored twice (the first in a group, which cannot be
// deduplicated per batch; the moved token's alone), as the callback
// guarantee allows: the copies agree, and authz applies the first.
func TestEditsWhileTicking(t *testing.T) {
	b := setup(t)
	testnats.KeepCallbacks(t, b.env.JS(t, "admin"))
	var ids []uint64
	for range 12 {
		ids = append(ids, b.send(t, "bob", "jobs", noop(), noop(), noop()))
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.proc.Run(ctx) }()
	t.Cleanup(func() { cancel(); testnats.Stopped(t, "authz", done) })
	ticker := b.env.Conn(t, "ticker")
	stopTicks := make(chan struct{})
	ticking := make(chan struct{})
	go func() {
		defer close(ticking)
		for {
			select {
			case <-stopTicks:
				return
			default:
				_, _ = ticker.Request(streams.TickSubject(domain), []byte("1"), time.Second)
			}
		}
	}()
	var evicted []uint64
	for i := range 6 {
		var ins api.InsertReply
		if e := b.call(t, "owner", api.OpInsert, api.InsertRequest{Domain: domain, Priority: pipeline.Med, Position: 0, Label: "jobs", Functions: []api.CallSpec{noop()}}, &ins); e != nil {
			t.Fatalf("insert: %+v", e)
		}
		ids = append(ids, ins.ID)
		var ev api.EvictReply
		if e := b.call(t, "owner", api.OpEvict, api.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: i}, &ev); e == nil {
			evicted = append(evicted, ev.ID)
		} else if e.Code != "416" && e.Code != "409" {
			t.Fatalf("evict: %+v", e)
		}
	}
	for _, id := range ids {
		rec := b.settledRecord(t, id)
		if rec.Status != pipeline.Executed && rec.Status != pipeline.RemovedByOwner {
			t.Fatalf("batch %d: %s", id, rec.Status)
		}
	}
	close(stopTicks)
	<-ticking
	b.callbacksDrained(t)
	cbs := testnats.Callbacks(t, b.env.JS(t, "admin"))
	repeated := 0
	for _, id := range ids {
		if len(cbs[id]) == 0 {
			t.Fatalf("batch %d: no callback (evicted %v)", id, evicted)
		}
		rec := b.record(t, id)
		for _, cb := range cbs[id] {
			if cb.Outcome.Status != rec.Status {
				t.Fatalf("batch %d is %s, and has callbacks %+v (evicted %v)", id, rec.Status, cbs[id], evicted)
			}
		}
		applied := 0
		for _, ev := range rec.History {
			if ev.What == records.EventCallback {
				applied++
			}
		}
		if applied != 1 {
			t.Fatalf("batch %d: its outcome applied %d times, want once (callbacks %+v)", id, applied, cbs[id])
		}
		repeated += len(cbs[id]) - 1
	}
	for _, id := range evicted {
		if rec := b.record(t, id); rec.Status != pipeline.RemovedByOwner {
			t.Fatalf("evicted %d is %s", id, rec.Status)
		}
	}
	t.Logf("%d batches, %d evicted while ticking, %d callbacks stored again", len(ids), len(evicted), repeated)
}

// TestHalfDoneInsertIsFinished leaves an insert's intent record behind, as a
// replica that died midway would, and checks the next replica finishes it.
func TestHalfDoneInsertIsFinished(t *testing.T) {
	b := setup(t)
	a := b.send(t, "alice", "jobs", noop())
	c := b.send(t, "alice", "jobs", noop())
	items := b.queueItems(t)
	b.stop()
	// The dead replica recorded batch n and its intent, then died before
	// queueing anything.
	n := pipeline.Batch{Domain: domain, Priority: pipeline.Med, Label: "jobs", Submitter: "owner",
		Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{{Type: handlers.TypeNoop}}}
	js := b.env.JS(t, "authz")
	id, _, err := submit.AssignID(b.ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	n.ID, n.CreatedAt = id, time.Now().UTC()
	kv, _ := js.KeyValue(b.ctx, streams.BucketBatches)
	if _, err := submit.Record(b.ctx, kv, &n, "", false); err != nil {
		t.Fatal(err)
	}
	intent, _ := json.Marshal(map[string]any{"domain": domain, "priority": "med", "new": id, "tail": items})
	locks, _ := js.KeyValue(b.ctx, streams.BucketLocks)
	if _, err := locks.Create(b.ctx, "edit."+domain+".med", intent); err != nil {
		t.Fatal(err)
	}
	b.startAuthz(t)
	testnats.Eventually(t, 5*time.Second, "edit finished", func() bool {
		_, err := locks.Get(b.ctx, "edit."+domain+".med")
		return err != nil
	})
	if q := b.queue(t, pipeline.Med); !equal(q, []uint64{id, a, c}) {
		t.Fatalf("queue %v, want %v", q, []uint64{id, a, c})
	}
}

func (b *bundle) queueItems(t *testing.T) []api.QueueItem {
	t.Helper()
	var rep api.QueueReply
	if e := b.call(t, "owner", api.OpQueue, api.QueueRequest{Domain: domain, Priority: pipeline.Med}, &rep); e != nil {
		t.Fatal(e)
	}
	return rep.Items
}

var _ = nats.ErrTimeout

// TestSendRepairedAfterAFailedToken: a send whose batch was recorded but
// whose token could not be published (the queue's stream gone for a
// moment) answers an error that names the batch, and its retry with the
// same idempotency key names the same one. Once the stream is back, the
// replica's repair loop queues each, without a restart: each runs once,
// with one callback, and frees its label's slot.
func TestSendRepairedAfterAFailedToken(t *testing.T) {
	b := setup(t)
	admin := b.env.JS(t, "admin")
	testnats.KeepCallbacks(t, admin)
	ctx := testnats.Context(t, 30*time.Second)
	if err := admin.DeleteStream(ctx, streams.StreamMed); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for _, idem := range []string{"", "order-9", "order-9"} {
		e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: "limited", Functions: api.Calls{noop()}, IdempotencyKey: idem}, nil)
		if e == nil {
			t.Fatal("a send with no queue stream succeeded")
		}
		var id uint64
		if _, err := fmt.Sscanf(e.Msg, "authz: batch %d is recorded", &id); err != nil || e.Code != "500" {
			t.Fatalf("send %q: %+v, want a 500 naming the recorded batch", idem, e)
		}
		ids = append(ids, id)
	}
	if ids[0] == ids[1] || ids[1] != ids[2] {
		t.Fatalf("batches %v: want two, the retry naming its first attempt's", ids)
	}
	if err := streams.Provision(ctx, admin, b.env.Settings, domain); err != nil {
		t.Fatal(err)
	}
	ids = ids[:2]
	for _, id := range ids {
		if rec := b.settled(t, id); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d: %s, want Executed", id, rec.Status)
		}
	}
	cbs := testnats.Callbacks(t, admin)
	for _, id := range ids {
		if n := len(cbs[id]); n != 1 {
			t.Fatalf("batch %d: %d callbacks, want 1", id, n)
		}
		if n := b.calls.get(fmt.Sprintf("%d/0", id)); n != 1 {
			t.Fatalf("batch %d: its function ran %d times, want once", id, n)
		}
	}
	// Both slots of the label are free again.
	for range 2 {
		b.send(t, "alice", "limited", noop())
	}
}
