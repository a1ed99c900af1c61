package authz_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/pipeline"
)

// TestSendManyAnswersEachBatch: a send_many is answered batch by batch, in
// the request's order: the batches allowed are queued and run, each
// refused one is answered with the error send gives it (errors.Is matches
// the client's sentinel) and leaves nothing behind. Two batches of one key
// join its order as listed.
func TestSendManyAnswersEachBatch(t *testing.T) {
	b := setup(t)
	noops := api.Calls{noop()}
	reqs := []api.SendRequest{
		{Label: "jobs", Functions: noops},
		{Label: "nope", Functions: noops},
		{Label: "transfer", Functions: noops, Key: "acct-1"},
		{Label: "transfer", Functions: api.Calls{{Type: "not.allowed"}}},
		{Label: "transfer", Functions: noops, Key: "acct-1"},
	}
	rep := answered(t, "send_many", func() (*api.SendManyReply, error) {
		return b.client(t, "bob").SendMany(b.ctx, api.SendManyRequest{Batches: reqs})
	})
	// bob may not submit under transfer: every batch of it is refused.
	want := []error{nil, client.ErrNotFound, client.ErrForbidden, client.ErrForbidden, client.ErrForbidden}
	for i, r := range rep.Results {
		err := client.ResultError(&r)
		if (want[i] == nil) != (err == nil) || (want[i] != nil && !errors.Is(err, want[i])) {
			t.Fatalf("bob's batch %d: %v (%+v), want %v", i, err, r, want[i])
		}
	}
	if rep.Results[0].Reply().Domain != domain {
		t.Fatalf("queued batch's reply %+v", rep.Results[0].Reply())
	}

	rep = answered(t, "send_many", func() (*api.SendManyReply, error) {
		return b.client(t, "alice").SendMany(b.ctx, api.SendManyRequest{Batches: reqs})
	})
	want = []error{nil, client.ErrNotFound, nil, client.ErrBadRequest, nil}
	var ids []uint64
	for i, r := range rep.Results {
		err := client.ResultError(&r)
		if (want[i] == nil) != (err == nil) || (want[i] != nil && !errors.Is(err, want[i])) {
			t.Fatalf("alice's batch %d: %v (%+v), want %v", i, err, r, want[i])
		}
		if err == nil {
			ids = append(ids, r.ID)
		}
	}
	if !strings.Contains(rep.Results[1].Error, `unknown label "nope"`) {
		t.Fatalf("unknown label answered %q", rep.Results[1].Error)
	}
	if ids[0] >= ids[1] || ids[1] >= ids[2] {
		t.Fatalf("ids %v not in the request's order", ids)
	}
	if rep.Results[2].Priority != pipeline.High {
		t.Fatalf("transfer batch %+v, want high priority", rep.Results[2])
	}
	// The second batch of acct-1 waits for the first: only the first is
	// queued until it finishes.
	if q := b.queue(t, pipeline.High); !equal(q, ids[1:2]) {
		t.Fatalf("high queue %v, want only the key's first batch %d", q, ids[1])
	}
	for _, id := range ids {
		if rec := b.settled(t, id); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d finished %s", id, rec.Status)
		}
	}
}

// TestSendManyIdempotent: a send_many sent again with the same
// idempotency keys queues nothing more: each batch comes back as the
// duplicate of its first submission.
func TestSendManyIdempotent(t *testing.T) {
	b := setup(t)
	req := api.SendManyRequest{Batches: []api.SendRequest{
		{Label: "jobs", Functions: api.Calls{noop()}, IdempotencyKey: "bulk-1"},
		{Label: "jobs", Functions: api.Calls{noop()}, IdempotencyKey: "bulk-2"},
	}}
	first := answered(t, "send_many", func() (*api.SendManyReply, error) { return b.client(t, "alice").SendMany(b.ctx, req) })
	again := answered(t, "send_many again", func() (*api.SendManyReply, error) { return b.client(t, "alice").SendMany(b.ctx, req) })
	for i := range req.Batches {
		f, a := first.Results[i], again.Results[i]
		if f.Failed() || a.Failed() || f.Duplicate || !a.Duplicate || f.ID != a.ID {
			t.Fatalf("batch %d: first %+v, again %+v; want the same batch, then as a duplicate", i, f, a)
		}
	}
	if q := b.queue(t, pipeline.Med); len(q) != 2 {
		t.Fatalf("queue %v, want the 2 batches once", q)
	}
}

// TestSendManyRefusedWhole: a request with no batches, too many, or a
// batch the client can tell is malformed is refused before it is sent;
// sent anyway, authz refuses it whole with 400 and queues nothing.
func TestSendManyRefusedWhole(t *testing.T) {
	b := setup(t)
	c := b.client(t, "alice")
	one := api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}}
	many := make([]api.SendRequest, api.MaxSendMany+1)
	for i := range many {
		many[i] = one
	}
	for _, tc := range []struct {
		name string
		reqs []api.SendRequest
		want string
	}{
		{"none", nil, "0 batches; expected 1 to 1000"},
		{"too many", many, "1001 batches; expected 1 to 1000"},
		{"no label", []api.SendRequest{one, {Functions: one.Functions}}, "batches[1]: label is empty"},
		{"no functions", []api.SendRequest{one, {Label: "jobs"}}, "batches[1]: no functions"},
	} {
		if _, err := c.SendMany(b.ctx, api.SendManyRequest{Batches: tc.reqs}); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: client answered %v, want ErrInvalid saying %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"none", `{"batches":[]}`, "batches: none; expected 1 to 1000"},
		{"too many", `{"batches":[` + strings.Repeat(`{"label":"jobs","functions":[{"type":"noop"}]},`, api.MaxSendMany) + `{"label":"jobs","functions":[{"type":"noop"}]}]}`, "batches: 1001; one send_many submits at most 1000"},
		{"not an array", `{"batches":{"label":"jobs"}}`, "request body"},
	} {
		_, ae := b.raw(t, "alice", api.OpSendMany, []byte(tc.body))
		if ae == nil || ae.Code != "400" || !strings.Contains(ae.Msg, tc.want) {
			t.Errorf("%s: authz answered %+v, want 400 saying %q", tc.name, ae, tc.want)
		}
	}
	if q := b.queue(t, pipeline.Med); len(q) != 0 {
		t.Fatalf("queue %v after refused requests, want empty", q)
	}
}

// TestSendManySubmitsARunOfBatches: a send_many of many plain batches
// (submitted together, records and tokens written before any is awaited)
// queues each of them with ids in the request's order, indexes each under
// its submitter, and each runs.
func TestSendManySubmitsARunOfBatches(t *testing.T) {
	b := setup(t)
	const n = 300
	reqs := make([]api.SendRequest, n)
	for i := range reqs {
		reqs[i] = api.SendRequest{Label: "jobs", Functions: api.Calls{noop()}}
	}
	alice := b.client(t, "alice")
	rep := answered(t, "send_many", func() (*api.SendManyReply, error) {
		return alice.SendMany(b.ctx, api.SendManyRequest{Batches: reqs})
	})
	ids := make([]uint64, n)
	for i, r := range rep.Results {
		if err := client.ResultError(&r); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		if ids[i] = r.ID; i > 0 && ids[i] <= ids[i-1] {
			t.Fatalf("batch %d has id %d after %d: not in the request's order", i, ids[i], ids[i-1])
		}
	}
	list := answered(t, "list", func() (*api.ListReply, error) {
		return alice.List(b.ctx, api.ListRequest{Limit: api.MaxListLimit})
	})
	listed := map[uint64]bool{}
	for _, it := range list.Items {
		listed[it.ID] = true
	}
	for _, id := range ids {
		if !listed[id] {
			t.Fatalf("batch %d not in alice's listing (%d items)", id, len(list.Items))
		}
	}
	for _, id := range ids {
		if rec := b.settled(t, id); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d finished %s", id, rec.Status)
		}
	}
}
