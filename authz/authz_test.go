package authz_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

func TestIDsInOrderAcrossQueues(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for i := range 6 {
		label := "transfer"
		if i%2 == 1 {
			label = "jobs"
		}
		ids = append(ids, b.send(t, "alice", label, noop()))
	}
	if !slices.IsSorted(ids) || slices.Compact(slices.Clone(ids)) == nil || len(slices.Compact(slices.Clone(ids))) != 6 {
		t.Fatalf("ids not strictly increasing: %v", ids)
	}
	if q := b.queue(t, pipeline.High); !equal(q, []uint64{ids[0], ids[2], ids[4]}) {
		t.Fatalf("high queue %v", q)
	}
	if q := b.queue(t, pipeline.Med); !equal(q, []uint64{ids[1], ids[3], ids[5]}) {
		t.Fatalf("med queue %v", q)
	}
	rec := b.record(t, ids[0])
	if rec.Status != pipeline.InProcess || rec.Batch.Submitter != "alice" || rec.Batch.Label != "transfer" || rec.Batch.Priority != pipeline.High || rec.Batch.Subroutine.Retry == nil {
		t.Fatalf("record %+v", rec)
	}
}

func TestRefusals(t *testing.T) {
	b := setup(t)
	tests := []struct {
		name string
		user string
		op   string
		req  any
		code string
	}{
		{name: "unknown label", user: "alice", op: "send", req: api.SendRequest{Label: "nope", Functions: []api.CallSpec{noop()}}, code: "404"},
		{name: "user not on the label", user: "bob", op: "send", req: api.SendRequest{Label: "transfer", Functions: []api.CallSpec{noop()}}, code: "403"},
		{name: "function type not allowed", user: "alice", op: "send", req: api.SendRequest{Label: "jobs", Functions: []api.CallSpec{{Type: handlers.TypeTransfer}}}, code: "400"},
		{name: "no functions", user: "alice", op: "send", req: api.SendRequest{Label: "jobs"}, code: "400"},
		{name: "unknown field", user: "alice", op: "send", req: map[string]any{"label": "jobs", "priority": "high"}, code: "400"},
		{name: "missing confirmation content", user: "alice", op: "send", req: api.SendRequest{Label: "confirmed", Functions: []api.CallSpec{noop()}}, code: "400"},
		{name: "pause by a caller", user: "alice", op: "pause", req: api.DomainRequest{Domain: domain}, code: "403"},
		{name: "evict by a caller", user: "alice", op: "evict", req: api.PositionRequest{Domain: domain, Priority: pipeline.Med}, code: "403"},
		{name: "insert by a caller", user: "bob", op: "insert", req: api.InsertRequest{Domain: domain, Priority: pipeline.Med, Label: "jobs", Functions: []api.CallSpec{noop()}}, code: "403"},
		{name: "replay by a caller", user: "alice", op: "replay", req: api.ReplayRequest{Seq: 1}, code: "403"},
		{name: "queue by a caller", user: "alice", op: "queue", req: api.QueueRequest{Domain: domain, Priority: pipeline.Med}, code: "403"},
		{name: "bad domain", user: "owner", op: "pause", req: api.DomainRequest{Domain: "a.b"}, code: "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := b.call(t, tt.user, tt.op, tt.req, nil)
			if e == nil || e.Code != tt.code || e.Msg == "" {
				t.Fatalf("got %+v, want code %s with a message", e, tt.code)
			}
		})
	}
	if q := b.queue(t, pipeline.Med); len(q) != 0 {
		t.Fatalf("refused submissions queued something: %v", q)
	}
	// bob cannot read alice's batch.
	id := b.send(t, "alice", "jobs", noop())
	if e := b.call(t, "bob", api.OpBatch, api.IDRequest{ID: id}, nil); e == nil || e.Code != "404" {
		t.Fatalf("bob read alice's batch: %+v", e)
	}
	if e := b.call(t, "alice", api.OpBatch, api.IDRequest{ID: id}, &api.BatchReply{}); e != nil {
		t.Fatalf("alice cannot read her batch: %+v", e)
	}
}

func TestCannotSubmitAsAnotherUser(t *testing.T) {
	b := setup(t)
	errs := make(chan error, 1)
	nc := b.env.Conn(t, "alice", nats_ErrorHandler(errs))
	if _, err := nc.Request(streams.AuthzSubject("bob", api.OpSend), []byte(`{"label":"jobs","functions":[{"type":"noop"}]}`), 500*time.Millisecond); err == nil {
		t.Fatal("alice could send as bob")
	}
	if err := <-errs; err == nil {
		t.Fatal("want a permissions violation")
	}
	if q := b.queue(t, pipeline.Med); len(q) != 0 {
		t.Fatalf("queued: %v", q)
	}
}

func TestConcurrencyLimit(t *testing.T) {
	b := setup(t)
	first := b.send(t, "alice", "limited", noop())
	b.send(t, "bob", "limited", noop())
	e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: "limited", Functions: []api.CallSpec{noop()}}, nil)
	if e == nil || e.Code != "409" {
		t.Fatalf("third batch over the limit: %+v", e)
	}
	// The refused submission left no trace in alice's listing.
	var list api.ListReply
	if e := b.call(t, "alice", api.OpList, api.ListRequest{}, &list); e != nil {
		t.Fatal(e)
	}
	if len(list.Items) != 1 || list.Items[0].ID != first {
		t.Fatalf("alice's listing %+v, want only batch %d", list.Items, first)
	}
	// The owner's insert bypasses the limit.
	var ins api.InsertReply
	if e := b.call(t, "owner", api.OpInsert, api.InsertRequest{Domain: domain, Priority: pipeline.Med, Position: 0, Label: "limited", Functions: []api.CallSpec{noop()}}, &ins); e != nil {
		t.Fatalf("owner insert: %+v", e)
	}
	b.settled(t, first)
	testnats.Eventually(t, 10*time.Second, "a slot freed", func() bool {
		return b.call(t, "alice", api.OpSend, api.SendRequest{Label: "limited", Functions: []api.CallSpec{noop()}}, nil) == nil
	})
}

func TestIdempotentSend(t *testing.T) {
	b := setup(t)
	req := api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop()}, IdempotencyKey: "order-42"}
	var r1, r2 api.SendReply
	if e := b.call(t, "alice", api.OpSend, req, &r1); e != nil {
		t.Fatal(e)
	}
	if e := b.call(t, "alice", api.OpSend, req, &r2); e != nil {
		t.Fatal(e)
	}
	if r1.ID != r2.ID || !r2.Duplicate {
		t.Fatalf("ids %d and %d (duplicate %v)", r1.ID, r2.ID, r2.Duplicate)
	}
	// Another user's same key is another batch.
	var r3 api.SendReply
	if e := b.call(t, "bob", api.OpSend, req, &r3); e != nil {
		t.Fatal(e)
	}
	if r3.ID == r1.ID {
		t.Fatal("bob's submission took alice's batch")
	}
	if q := b.queue(t, pipeline.Med); !equal(q, []uint64{r1.ID, r3.ID}) {
		t.Fatalf("queue %v", q)
	}
}

// TestEvictInsertLikeAList applies random evicts and inserts and checks the
// queue against a plain list after each, then drains it and checks the
// processor executes exactly that order.
func TestEvictInsertLikeAList(t *testing.T) {
	b := setup(t)
	var model []uint64
	for range 5 {
		model = append(model, b.send(t, "alice", "jobs", noop()))
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	var evicted []uint64
	for step := range 24 {
		if step%2 == 0 {
			pos := rnd.IntN(len(model) + 2) // sometimes past the end
			var rep api.InsertReply
			e := b.call(t, "owner", api.OpInsert, api.InsertRequest{Domain: domain, Priority: pipeline.Med, Position: pos, Label: "jobs", Functions: []api.CallSpec{noop()}}, &rep)
			if pos > len(model) {
				if e == nil || e.Code != "416" {
					t.Fatalf("insert at %d of %d: %+v", pos, len(model), e)
				}
				continue
			}
			if e != nil {
				t.Fatalf("insert at %d: %+v", pos, e)
			}
			model = slices.Insert(model, pos, rep.ID)
		} else {
			pos := rnd.IntN(len(model) + 1)
			var rep api.EvictReply
			e := b.call(t, "owner", api.OpEvict, api.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: pos}, &rep)
			if pos >= len(model) {
				if e == nil || e.Code != "416" {
					t.Fatalf("evict at %d of %d: %+v", pos, len(model), e)
				}
				continue
			}
			if e != nil {
				t.Fatalf("evict at %d: %+v", pos, e)
			}
			if rep.ID != model[pos] {
				t.Fatalf("evicted %d, want %d", rep.ID, model[pos])
			}
			evicted = append(evicted, rep.ID)
			model = slices.Delete(model, pos, pos+1)
		}
		if q := b.queue(t, pipeline.Med); !equal(q, model) {
			t.Fatalf("step %d: queue %v, want %v", step, q, model)
		}
	}
	var order []uint64
	testnats.Eventually(t, 20*time.Second, "queue drained", func() bool {
		rep := b.proc.Tick(b.ctx, 1)
		if len(rep.Steps) == 1 && rep.Steps[0].Action == api.ActionFinished {
			order = append(order, rep.Steps[0].BatchID)
		}
		return len(order) == len(model)
	})
	if !equal(order, model) {
		t.Fatalf("executed %v, want %v", order, model)
	}
	for _, id := range evicted {
		rec := b.settledRecord(t, id)
		if rec.Status != pipeline.RemovedByOwner {
			t.Fatalf("evicted batch %d is %s", id, rec.Status)
		}
		if b.calls.get(key(id)) != 0 {
			t.Fatalf("evicted batch %d executed", id)
		}
	}
}

func key(id uint64) string { return streams.BatchKey(id) + "/0" }

func (b *bundle) settledRecord(t *testing.T, id uint64) *api.BatchRecord {
	t.Helper()
	var rec *api.BatchRecord
	testnats.Eventually(t, 10*time.Second, "record terminal", func() bool {
		rec = b.record(t, id)
		return rec.Status.Terminal()
	})
	return rec
}

// TestReplyOnlyToTheCallersInbox: a caller chooses the reply subject, and
// authz may write where callers may not; a reply aimed elsewhere is refused.
func TestReplyOnlyToTheCallersInbox(t *testing.T) {
	b := setup(t)
	nc := b.env.Conn(t, "alice")
	m := nats.NewMsg(streams.AuthzSubject("alice", api.OpSend))
	m.Reply = "$KV.batches.4242"
	m.Data = []byte(`{"label":"jobs","functions":[{"type":"noop"}]}`)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	// A request that is answered proves the first was processed (or refused) before it.
	b.send(t, "alice", "jobs", noop())
	kv, err := b.env.JS(t, "admin").KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(b.ctx, "4242"); err == nil {
		t.Fatal("authz wrote its reply into the batches bucket")
	}
	if q := b.queue(t, pipeline.Med); len(q) != 1 {
		t.Fatalf("queue %v: the refused request queued a batch", q)
	}
}
