package authz_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestIdempotencyKeyConflict: a key reused for a different submission is
// refused, naming the key; the same submission again is a duplicate.
func TestIdempotencyKeyConflict(t *testing.T) {
	b := setup(t)
	payload := func(s string) pipeline.Payload {
		var p pipeline.Payload
		if err := json.Unmarshal([]byte(s), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := api.SendRequest{Label: "jobs", IdempotencyKey: "order-42",
		Functions: []api.CallSpec{{Type: handlers.TypeNoop, Payload: payload(`{"amount":5,"to":"bob"}`)}}}
	var r1 api.SendReply
	if e := b.call(t, "alice", api.OpSend, first, &r1); e != nil {
		t.Fatal(e)
	}
	tests := []struct {
		name string
		req  api.SendRequest
	}{
		{name: "another label", req: api.SendRequest{Label: "transfer", IdempotencyKey: "order-42", Functions: first.Functions}},
		{name: "another payload", req: api.SendRequest{Label: "jobs", IdempotencyKey: "order-42",
			Functions: []api.CallSpec{{Type: handlers.TypeNoop, Payload: payload(`{"amount":500,"to":"bob"}`)}}}},
		{name: "another function", req: api.SendRequest{Label: "jobs", IdempotencyKey: "order-42",
			Functions: []api.CallSpec{{Type: handlers.TypeFail, Payload: first.Functions[0].Payload}}}},
		{name: "one more function", req: api.SendRequest{Label: "jobs", IdempotencyKey: "order-42",
			Functions: append([]api.CallSpec{noop()}, first.Functions...)}},
		{name: "another serialisation key", req: api.SendRequest{Label: "jobs", IdempotencyKey: "order-42", Key: "k1", Functions: first.Functions}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := b.call(t, "alice", api.OpSend, tt.req, nil)
			if e == nil || e.Code != "409" || !strings.Contains(e.Msg, `"order-42"`) {
				t.Fatalf("got %+v, want a 409 naming the key", e)
			}
		})
	}
	// The same content, its payload's keys in another order, is the same submission.
	again := first
	again.Functions = []api.CallSpec{{Type: handlers.TypeNoop, Payload: payload(`{"to":"bob","amount":5}`)}}
	var r2 api.SendReply
	if e := b.call(t, "alice", api.OpSend, again, &r2); e != nil || r2.ID != r1.ID || !r2.Duplicate {
		t.Fatalf("same submission again: %+v %+v, want batch %d as a duplicate", e, r2, r1.ID)
	}
	if q := b.queue(t, pipeline.Med); !equal(q, []uint64{r1.ID}) {
		t.Fatalf("queue %v", q)
	}
}

// TestReplayIdempotentPastTheDuplicateWindow: replaying a dead letter again
// after the id log has forgotten the first replay's deduplication id still
// gives the same batch and queues nothing more.
func TestReplayIdempotentPastTheDuplicateWindow(t *testing.T) {
	const window = 100 * time.Millisecond
	b := setup(t, testnats.WithSettings(func(s *streams.Settings) { s.DuplicateWindow = window }))
	id := b.send(t, "alice", "jobs", api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})})
	rec := b.settled(t, id)
	if rec.DeadLetter == 0 {
		t.Fatalf("no dead letter: %+v", rec)
	}
	var first api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: rec.DeadLetter}, &first); e != nil || len(first.Replayed) != 1 {
		t.Fatalf("replay: %+v %+v", e, first)
	}
	newID := first.Replayed[0].AsNew
	// A probe published after the replay is deduplicated until the window
	// has passed for it, and so for the replay's id too.
	js := b.env.JS(t, "admin")
	probe := func() bool {
		m := nats.NewMsg(streams.IDsSubject)
		m.Header.Set(nats.MsgIdHdr, "probe")
		ack, err := js.PublishMsg(b.ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Duplicate
	}
	if probe() {
		t.Fatal("the probe was a duplicate at once")
	}
	testnats.Eventually(t, 10*time.Second, "duplicate window passed", func() bool { return !probe() })
	var again api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Seq: rec.DeadLetter}, &again); e != nil || len(again.Replayed) != 1 || again.Replayed[0].AsNew != newID {
		t.Fatalf("replay past the duplicate window: %+v %+v, want batch %d", e, again, newID)
	}
	var all api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Domain: domain, All: true}, &all); e != nil || len(all.Replayed) != 0 {
		t.Fatalf("replay all: %+v %+v, want nothing left to replay", e, all)
	}
	if q := b.queue(t, pipeline.Med); !equal(q, []uint64{newID}) {
		t.Fatalf("queue %v, want only the replay %d", q, newID)
	}
	if n := b.settled(t, newID); n.Batch.ReplayOf != id {
		t.Fatalf("replay not linked: %+v", n.Batch)
	}
}

// TestHalfDoneReplayIsFinished: a replay cut short after it claimed its
// batch id (the replay record exists, nothing was recorded or queued) is
// finished by the next replay of the same dead letter, with that id.
func TestHalfDoneReplayIsFinished(t *testing.T) {
	b := setup(t)
	id := b.send(t, "alice", "jobs", api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})})
	rec := b.settled(t, id)
	js := b.env.JS(t, "admin")
	claimed, _, err := submit.AssignID(b.ctx, js, "")
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(b.ctx, fmt.Sprintf("replay.%d", rec.DeadLetter), fmt.Appendf(nil, `{"id":%d}`, claimed)); err != nil {
		t.Fatal(err)
	}
	var list api.DLQReply
	if e := b.call(t, "owner", api.OpDLQ, api.DLQRequest{Domain: domain}, &list); e != nil || len(list.Items) != 1 || list.Items[0].ReplayedAs != 0 {
		t.Fatalf("a half-done replay listed as replayed: %+v %+v", e, list)
	}
	var rep api.ReplayReply
	if e := b.call(t, "owner", api.OpReplay, api.ReplayRequest{Domain: domain, All: true}, &rep); e != nil || len(rep.Replayed) != 1 || rep.Replayed[0].AsNew != claimed {
		t.Fatalf("replay: %+v %+v, want batch %d", e, rep, claimed)
	}
	if q := b.queue(t, pipeline.Med); !equal(q, []uint64{claimed}) {
		t.Fatalf("queue %v, want %d", q, claimed)
	}
	if n := b.settled(t, claimed); n.Batch.ReplayOf != id {
		t.Fatalf("replay not linked: %+v", n.Batch)
	}
}
