package authz_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestList: a submitter pages through their own batches, newest first,
// with a cursor, filtered by status; nobody sees another's but the owner.
func TestList(t *testing.T) {
	b := setup(t)
	var alice []uint64
	for range 4 {
		alice = append(alice, b.send(t, "alice", "jobs", noop()))
	}
	bobs := b.send(t, "bob", "jobs", noop())
	failed := b.send(t, "alice", "jobs", api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})})
	alice = append(alice, failed)
	b.settled(t, failed)

	var got []uint64
	var rep api.ListReply
	req := api.ListRequest{Limit: 2}
	for page := 0; ; page++ {
		rep = api.ListReply{}
		if e := b.call(t, "alice", api.OpList, req, &rep); e != nil {
			t.Fatal(e)
		}
		for _, it := range rep.Items {
			got = append(got, it.ID)
		}
		if rep.Next == 0 {
			break
		}
		if page == 5 {
			t.Fatalf("no end of pages: %v", got)
		}
		req.Before = rep.Next
	}
	want := []uint64{alice[4], alice[3], alice[2], alice[1], alice[0]}
	if !equal(got, want) {
		t.Fatalf("pages %v, want %v", got, want)
	}

	if e := b.call(t, "alice", api.OpList, api.ListRequest{Status: pipeline.Rejected}, &rep); e != nil {
		t.Fatal(e)
	}
	if len(rep.Items) != 1 || rep.Items[0].ID != failed || rep.Items[0].DeadLetter == 0 || rep.Items[0].Outcome == "" {
		t.Fatalf("rejected: %+v", rep)
	}
	if e := b.call(t, "bob", api.OpList, api.ListRequest{}, &rep); e != nil || len(rep.Items) != 1 || rep.Items[0].ID != bobs {
		t.Fatalf("bob's: %+v %+v", rep, e)
	}
	if e := b.call(t, "owner", api.OpList, api.ListRequest{Submitter: "bob"}, &rep); e != nil || len(rep.Items) != 1 || rep.Items[0].ID != bobs {
		t.Fatalf("bob's, as the owner: %+v %+v", rep, e)
	}
	if e := b.call(t, "alice", api.OpList, api.ListRequest{Submitter: "bob"}, nil); e == nil || e.Code != "403" {
		t.Fatalf("bob's, as alice: %+v, want 403", e)
	}
	for _, bad := range []api.ListRequest{{Limit: -1}, {Limit: api.MaxListLimit + 1}, {Status: "Done"}} {
		if e := b.call(t, "alice", api.OpList, bad, nil); e == nil || e.Code != "400" {
			t.Errorf("%+v: got %+v, want 400", bad, e)
		}
	}
	// A user with no batches gets an empty page, not an error.
	if e := b.call(t, "oracle", api.OpList, api.ListRequest{}, &rep); e != nil || len(rep.Items) != 0 || rep.Next != 0 {
		t.Fatalf("oracle's: %+v %+v", rep, e)
	}
}

// TestCancel: a submitter cancels their own queued batch, which finishes
// RemovedByOwner and never runs; another's is a 404, as a missing batch is,
// and a repeat answers as the first did.
func TestCancel(t *testing.T) {
	b := setup(t)
	id := b.send(t, "alice", "jobs", noop())
	var rep api.CancelReply
	if e := b.call(t, "bob", api.OpCancel, api.IDRequest{ID: id}, nil); e == nil || e.Code != "404" {
		t.Fatalf("bob cancels alice's: %+v, want 404", e)
	}
	if e := b.call(t, "bob", api.OpCancel, api.IDRequest{ID: id + 100}, nil); e == nil || e.Code != "404" {
		t.Fatalf("bob cancels nothing: %+v, want 404", e)
	}
	if e := b.call(t, "alice", api.OpCancel, api.IDRequest{ID: id}, &rep); e != nil || rep.ID != id || rep.Status != pipeline.RemovedByOwner {
		t.Fatalf("alice cancels hers: %+v %+v", rep, e)
	}
	rec := b.settled(t, id)
	if rec.Status != pipeline.RemovedByOwner || rec.Outcome.Reason != "cancelled by alice" {
		t.Fatalf("record %+v", rec)
	}
	if b.calls.get(key(id)) != 0 {
		t.Fatal("a cancelled batch ran")
	}
	if q := b.queue(t, pipeline.Med); len(q) != 0 {
		t.Fatalf("queue after cancel: %v", q)
	}
	rep = api.CancelReply{}
	if e := b.call(t, "alice", api.OpCancel, api.IDRequest{ID: id}, &rep); e != nil || rep.ID != id || rep.Status != pipeline.RemovedByOwner {
		t.Fatalf("cancel again: %+v %+v, want the first answer", rep, e)
	}
	if e := b.call(t, "alice", api.OpCancel, api.IDRequest{ID: 0}, nil); e == nil || e.Code != "404" {
		t.Fatalf("cancel id 0: %+v, want 404", e)
	}
}

// TestCancelParked: a batch waiting for its confirmation is cancelled, and
// the token that waits out its timeout goes with it.
func TestCancelParked(t *testing.T) {
	b := setup(t)
	id := b.send(t, "bob", "confirmed", api.CallSpec{Type: handlers.TypeNoop, Expect: "x"})
	testnats.Eventually(t, 5*time.Second, "parked", func() bool {
		rep := b.proc.Tick(b.ctx, 1)
		return len(rep.Steps) == 1 && rep.Steps[0].Action == api.ActionParked
	})
	if e := b.call(t, "bob", api.OpCancel, api.IDRequest{ID: id}, nil); e != nil {
		t.Fatal(e)
	}
	if rec := b.settled(t, id); rec.Status != pipeline.RemovedByOwner {
		t.Fatalf("record %+v", rec)
	}
	if n := len(testnats.Messages(t, b.env.JS(t, "admin"), streams.QueueStream(pipeline.Med))); n != 0 {
		t.Fatalf("%d tokens left in the queue", n)
	}
}

// TestListsDoNotStallOthers: while a submitter with a long history (each
// batch its own keyed, idempotent submission) lists, many pages at once,
// another user's sends are answered, and every listing is too.
func TestListsDoNotStallOthers(t *testing.T) {
	b := setup(t)
	const history, listers, pages = 300, 16, 4
	alice, err := client.New(b.conn(t, "alice"), "alice", client.Config{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := client.New(b.conn(t, "bob"), "bob", client.Config{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	answered(t, "send", func() (*api.SendReply, error) {
		return alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop()}, Key: "k-first", IdempotencyKey: "first"})
	})
	var wg sync.WaitGroup
	errs := make(chan error, history+listers*pages+64)
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < history; i += 8 {
				n := strconv.Itoa(i)
				if _, err := alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop()}, Key: "k" + n, IdempotencyKey: "i" + n}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	ctx, stop := context.WithCancel(b.ctx)
	defer stop()
	for range listers {
		wg.Go(func() {
			for range pages {
				rep, err := alice.List(ctx, api.ListRequest{Limit: 10})
				if err != nil {
					errs <- err
					return
				}
				if len(rep.Items) != 10 || rep.Next == 0 {
					errs <- fmt.Errorf("a page of alice's listing: %d items, next %d; want 10 and more", len(rep.Items), rep.Next)
					return
				}
			}
		})
	}
	var sent []uint64
	for range 10 {
		rep, err := bob.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop()}})
		if err != nil {
			t.Fatalf("bob's send while alice lists: %v", err)
		}
		sent = append(sent, rep.ID)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var rep api.ListReply
	if e := b.call(t, "bob", api.OpList, api.ListRequest{}, &rep); e != nil || len(rep.Items) != len(sent) {
		t.Fatalf("bob's listing %+v %+v, want his %d batches", rep, e, len(sent))
	}
}
