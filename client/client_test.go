package client_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestSendAndBatch: a batch sent through the client runs to its end, its
// submitter reads it, and a repeated send with the same idempotency key
// returns the same batch as a duplicate.
func TestSendAndBatch(t *testing.T) {
	b := setup(t)
	sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}, IdempotencyKey: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	if sent.ID == 0 || sent.Domain != domain || sent.Priority != pipeline.Med || sent.Duplicate {
		t.Fatalf("send: %+v", sent)
	}
	again, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}, IdempotencyKey: "order-1"})
	if err != nil || again.ID != sent.ID || !again.Duplicate {
		t.Fatalf("repeated send: %+v %v", again, err)
	}
	if rec := b.settled(t, sent.ID); rec.Status != pipeline.Executed {
		t.Fatalf("record %+v", rec)
	}
	rep, err := b.alice.Batch(b.ctx, api.IDRequest{ID: sent.ID})
	if err != nil || rep.Record.Batch.Submitter != "alice" || rep.Record.Status != pipeline.Executed {
		t.Fatalf("batch as its submitter: %+v %v", rep, err)
	}
}

// TestOwnerControls: queue, insert, evict, pause and resume, as the owner.
func TestOwnerControls(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for range 2 {
		sent, err := b.bob.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sent.ID)
	}
	ins, err := b.owner.Insert(b.ctx, api.InsertRequest{Domain: domain, Priority: pipeline.Med, Position: 1, Label: "jobs", Functions: api.Calls{noop()}})
	if err != nil || ins.Position != 1 {
		t.Fatalf("insert: %+v %v", ins, err)
	}
	q, err := b.owner.Queue(b.ctx, api.QueueRequest{Domain: domain, Priority: pipeline.Med})
	if err != nil {
		t.Fatal(err)
	}
	if q.Length != 3 || q.Items[0].ID != ids[0] || q.Items[1].ID != ins.ID || q.Items[2].ID != ids[1] {
		t.Fatalf("queue after insert: %+v (sent %v, inserted %d)", q, ids, ins.ID)
	}
	ev, err := b.owner.Evict(b.ctx, api.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: 0})
	if err != nil || ev.ID != ids[0] {
		t.Fatalf("evict: %+v %v", ev, err)
	}
	// Without ticking: the batches behind it stay queued.
	testnats.Eventually(t, 5*time.Second, "evicted batch recorded", func() bool {
		rep, err := b.owner.Batch(b.ctx, api.IDRequest{ID: ids[0]})
		return err == nil && rep.Record.Status == pipeline.RemovedByOwner
	})
	q, err = b.owner.Queue(b.ctx, api.QueueRequest{Domain: domain, Priority: pipeline.Med, From: 1})
	if err != nil || q.Length != 2 || len(q.Items) != 1 || q.Items[0].ID != ids[1] {
		t.Fatalf("queue [1, end) after evict: %+v %v", q, err)
	}
	st, err := b.owner.Pause(b.ctx, api.DomainRequest{Domain: domain})
	if err != nil || !st.Paused || st.Domain != domain {
		t.Fatalf("pause: %+v %v", st, err)
	}
	if st, err = b.owner.Resume(b.ctx, api.DomainRequest{Domain: domain}); err != nil || st.Paused {
		t.Fatalf("resume: %+v %v", st, err)
	}
}

// TestConfirm: the oracle confirms a function parked for its confirmation,
// and the batch finishes.
func TestConfirm(t *testing.T) {
	b := setup(t)
	sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: "confirmed", Functions: api.Calls{{Type: "noop", Expect: "block-17"}}})
	if err != nil {
		t.Fatal(err)
	}
	waitParked(t, b, sent.ID)
	// A running processor takes in the confirmation as it arrives.
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.proc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	rep, err := b.oracle.Confirm(b.ctx, api.ConfirmRequest{ID: sent.ID, Index: 0, Content: "block-17"})
	if err != nil || rep.ID != sent.ID || rep.Index != 0 {
		t.Fatalf("confirm: %+v %v", rep, err)
	}
	if rec := b.settled(t, sent.ID); rec.Status != pipeline.Executed {
		t.Fatalf("record %+v", rec)
	}
}

func waitParked(t *testing.T, b *bundle, id uint64) {
	t.Helper()
	for i := 0; ; i++ {
		rep, err := b.alice.Batch(b.ctx, api.IDRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Progress != nil && rep.Progress.State == api.StateParked {
			return
		}
		if i == 1000 {
			t.Fatalf("batch %d never parked: %+v", id, rep)
		}
		b.proc.Tick(b.ctx, 1)
	}
}

// TestDLQAndReplay: a failed batch is listed among the dead letters and
// replayed as a new batch, the same one when replayed again.
func TestDLQAndReplay(t *testing.T) {
	b := setup(t)
	sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{fail()}})
	if err != nil {
		t.Fatal(err)
	}
	rec := b.settled(t, sent.ID)
	list, err := b.owner.DLQ(b.ctx, api.DLQRequest{Domain: domain})
	if err != nil || len(list.Items) != 1 || list.Items[0].BatchID != sent.ID || list.Items[0].Seq != rec.DeadLetter {
		t.Fatalf("dlq: %+v %v (record %+v)", list, err, rec)
	}
	rep, err := b.owner.Replay(b.ctx, api.ReplayRequest{Seq: rec.DeadLetter})
	if err != nil || len(rep.Replayed) != 1 || rep.Replayed[0].From != sent.ID || rep.Replayed[0].AsNew == 0 {
		t.Fatalf("replay: %+v %v", rep, err)
	}
	again, err := b.owner.Replay(b.ctx, api.ReplayRequest{Seq: rec.DeadLetter})
	if err != nil || again.Replayed[0].AsNew != rep.Replayed[0].AsNew {
		t.Fatalf("replayed again: %+v %v", again, err)
	}
}

// TestReload: the owner reloads the table file; a label added to it can be
// sent under at once.
func TestReload(t *testing.T) {
	b := setup(t)
	extra := api.SendRequest{Label: "extra", Functions: api.Calls{noop()}}
	if _, err := b.alice.Send(b.ctx, extra); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("send under a label not in the table yet: %v", err)
	}
	table := tableYAML + "  extra:\n    domain: pay\n    users: [alice]\n    mode: atomic\n    priority: high\n    functions: {noop: {}}\n"
	if err := os.WriteFile(b.table, []byte(table), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := b.owner.Reload(b.ctx)
	if err != nil || rep.Labels != 5 {
		t.Fatalf("reload: %+v %v", rep, err)
	}
	if sent, err := b.alice.Send(b.ctx, extra); err != nil || sent.Priority != pipeline.High {
		t.Fatalf("send after reload: %+v %v", sent, err)
	}
}

// TestInspection: the owner's views of domains and in-flight batches, and
// a submitter's listing and cancel of their own batches, through the client.
func TestInspection(t *testing.T) {
	b := setup(t)
	if _, err := b.owner.Pause(b.ctx, api.DomainRequest{Domain: domain}); err != nil {
		t.Fatal(err)
	}
	var ids []uint64
	for range 3 {
		sent, err := b.alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sent.ID)
	}
	doms, err := b.owner.Domains(b.ctx)
	if err != nil || len(doms.Domains) != 1 || !doms.Domains[0].Paused || doms.Domains[0].Depth[pipeline.Med] != 3 {
		t.Fatalf("domains: %+v %v", doms, err)
	}
	fl, err := b.owner.InFlight(b.ctx, api.InFlightRequest{Domain: domain, Limit: 2})
	if err != nil || fl.Total != nil || !fl.More || len(fl.Items) != 2 || fl.Items[0].ID != ids[0] {
		t.Fatalf("inflight: %+v %v", fl, err)
	}
	fl, err = b.owner.InFlight(b.ctx, api.InFlightRequest{Domain: domain, Limit: 2, Total: true})
	if err != nil || fl.Total == nil || *fl.Total != 3 || !fl.More || len(fl.Items) != 2 {
		t.Fatalf("inflight: %+v %v", fl, err)
	}
	page, err := b.alice.List(b.ctx, api.ListRequest{Limit: 2})
	if err != nil || len(page.Items) != 2 || page.Items[0].ID != ids[2] || page.Next == 0 {
		t.Fatalf("list: %+v %v", page, err)
	}
	if _, err := b.bob.Cancel(b.ctx, api.IDRequest{ID: ids[0]}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("bob cancels alice's: %v", err)
	}
	if rep, err := b.alice.Cancel(b.ctx, api.IDRequest{ID: ids[0]}); err != nil || rep.Status != pipeline.RemovedByOwner {
		t.Fatalf("cancel: %+v %v", rep, err)
	}
	if rep, err := b.alice.Cancel(b.ctx, api.IDRequest{ID: ids[0]}); err != nil || rep.Status != pipeline.RemovedByOwner {
		t.Fatalf("cancel again, as a retry would: %+v %v, want the first answer", rep, err)
	}
	for name, err := range map[string]error{
		"domains as alice": func() error { _, err := b.alice.Domains(b.ctx); return err }(),
		"inflight limit": func() error {
			_, err := b.owner.InFlight(b.ctx, api.InFlightRequest{Domain: domain, Limit: -1})
			return err
		}(),
		"list limit": func() error {
			_, err := b.alice.List(b.ctx, api.ListRequest{Limit: api.MaxListLimit + 1})
			return err
		}(),
		"cancel 0": func() error { _, err := b.alice.Cancel(b.ctx, api.IDRequest{}); return err }(),
	} {
		want := client.ErrInvalid
		if name == "domains as alice" {
			want = client.ErrForbidden
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", name, err, want)
		}
	}
}

// TestKeys: a batch behind its key's head waits, and the owner sees the key
// with its head and one batch waiting; others may not look.
func TestKeys(t *testing.T) {
	b := setup(t)
	var ids []uint64
	for range 2 {
		sent, err := b.bob.Send(b.ctx, api.SendRequest{Label: "jobs", Key: "acct-1", Functions: api.Calls{noop()}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sent.ID)
	}
	rep, err := b.owner.Keys(b.ctx, api.KeysRequest{Domain: domain})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Keys) != 1 || rep.Keys[0].Key != "acct-1" || rep.Keys[0].Head != ids[0] || rep.Keys[0].Waiting != 1 ||
		rep.Keys[0].State != api.TxnWaiting || rep.Keys[0].Queue != api.QueueFree {
		t.Fatalf("keys: %+v, want acct-1 with head %d WAITING / FREE and one waiting", rep, ids[0])
	}
	if _, err := b.bob.Keys(b.ctx, api.KeysRequest{Domain: domain}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("keys as bob: %v, want ErrForbidden", err)
	}
	if _, err := b.owner.Keys(b.ctx, api.KeysRequest{Domain: domain, Limit: -1}); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("keys with limit -1: %v, want ErrInvalid", err)
	}
}
