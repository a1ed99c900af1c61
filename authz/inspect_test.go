package authz_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestInFlight: the owner sees a domain's unfinished batches oldest first,
// across priorities, with the function each runs next, its attempts and the
// processor that moved it last; nobody else sees them.
func TestInFlight(t *testing.T) {
	b := setup(t)
	stepped := b.send(t, "alice", "jobs", noop(), noop())
	// The queue's consumer learns of a token a moment after its publish is
	// acknowledged, so the first tick may find nothing yet.
	var tick api.TickReport
	testnats.Eventually(t, 5*time.Second, "a step", func() bool {
		tick = b.proc.Tick(b.ctx, 1)
		return tick.Status != api.TickNoMessages
	})
	if len(tick.Steps) != 1 || tick.Steps[0].Action != api.ActionRotated {
		t.Fatalf("tick: %+v", tick)
	}
	waiting := b.send(t, "bob", "jobs", noop())
	high := b.send(t, "alice", "transfer", noop())

	var rep api.InFlightReply
	if e := b.call(t, "owner", api.OpInFlight, api.InFlightRequest{Domain: domain}, &rep); e != nil {
		t.Fatal(e)
	}
	if rep.Total != nil || rep.More || len(rep.Items) != 3 {
		t.Fatalf("inflight: %+v", rep)
	}
	first, second, third := rep.Items[0], rep.Items[1], rep.Items[2]
	if first.ID != stepped || second.ID != waiting || third.ID != high {
		t.Fatalf("not oldest first: %+v", rep.Items)
	}
	if first.Holder != processor.DefaultName || first.Next != 1 || first.Functions != 2 || first.Attempts != 1 ||
		first.Rotations != 1 || first.State != api.StateQueued || first.Submitter != "alice" || first.Label != "jobs" ||
		first.Since.Before(first.CreatedAt) {
		t.Fatalf("the stepped batch: %+v", first)
	}
	if second.Holder != "" || second.Attempts != 0 || !second.Since.Equal(second.CreatedAt) || second.Position != 1 {
		t.Fatalf("the waiting batch: %+v", second)
	}
	if third.Priority != pipeline.High || third.Position != 0 || third.AgeMS < 0 {
		t.Fatalf("the high batch: %+v", third)
	}

	for _, c := range []struct {
		name  string
		req   api.InFlightRequest
		items int
		total int // -1: none
		more  bool
	}{
		{name: "all, counted", req: api.InFlightRequest{Domain: domain, Total: true}, items: 3, total: 3},
		{name: "limit 1", req: api.InFlightRequest{Domain: domain, Limit: 1}, items: 1, total: -1, more: true},
		{name: "limit 1, counted", req: api.InFlightRequest{Domain: domain, Limit: 1, Total: true}, items: 1, total: 3, more: true},
		{name: "limit 2", req: api.InFlightRequest{Domain: domain, Limit: 2}, items: 2, total: -1, more: true},
	} {
		var rep api.InFlightReply
		if e := b.call(t, "owner", api.OpInFlight, c.req, &rep); e != nil {
			t.Fatalf("%s: %+v", c.name, e)
		}
		total := -1
		if rep.Total != nil {
			total = *rep.Total
		}
		if len(rep.Items) != c.items || total != c.total || rep.More != c.more || rep.Items[0].ID != stepped {
			t.Errorf("%s: %d items, total %d, more %v, first %d; want %d, %d, %v, %d", c.name, len(rep.Items), total, rep.More, rep.Items[0].ID, c.items, c.total, c.more, stepped)
		}
	}
	for _, bad := range []api.InFlightRequest{{Domain: domain, Limit: -1}, {Domain: domain, Limit: api.MaxInFlight + 1}, {Domain: "a.b"}} {
		if e := b.call(t, "owner", api.OpInFlight, bad, nil); e == nil || e.Code != "400" {
			t.Errorf("%+v: got %+v, want 400", bad, e)
		}
	}
	if e := b.call(t, "alice", api.OpInFlight, api.InFlightRequest{Domain: domain}, nil); e == nil || e.Code != "403" {
		t.Fatalf("alice: %+v, want 403", e)
	}
}

// TestDomains: the owner sees each domain's queue depth per priority, its
// dead letters and its pause state.
func TestDomains(t *testing.T) {
	b := setup(t)
	failed := b.send(t, "alice", "jobs", api.CallSpec{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})})
	if rec := b.settled(t, failed); rec.DeadLetter == 0 {
		t.Fatalf("no dead letter: %+v", rec)
	}
	b.send(t, "alice", "jobs", noop())
	b.send(t, "alice", "transfer", noop())
	b.send(t, "alice", "transfer", noop())
	if e := b.call(t, "owner", api.OpPause, api.DomainRequest{Domain: domain}, nil); e != nil {
		t.Fatal(e)
	}
	var rep api.DomainsReply
	if e := b.call(t, "owner", api.OpDomains, struct{}{}, &rep); e != nil {
		t.Fatal(e)
	}
	if len(rep.Domains) != 1 {
		t.Fatalf("domains: %+v", rep)
	}
	d := rep.Domains[0]
	if d.Domain != domain || !d.Paused || d.PausedBy != "owner" || d.Depth[pipeline.High] != 2 || d.Depth[pipeline.Med] != 1 || d.DeadLetters != 1 || d.Throttle != nil {
		t.Fatalf("domain: %+v", d)
	}
	// A throttled domain shows the budget its processors draw from.
	locks, err := b.env.JS(t, "processor").KeyValue(b.ctx, streams.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := streams.NewThrottleStore(locks, time.Now).Take(b.ctx, domain, 7, 3); err != nil {
		t.Fatal(err)
	}
	if e := b.call(t, "owner", api.OpDomains, struct{}{}, &rep); e != nil {
		t.Fatal(e)
	}
	if th := rep.Domains[0].Throttle; th == nil || th.Limit != 7 || th.Used != 3 {
		t.Fatalf("throttle: %+v", th)
	}
	if e := b.call(t, "bob", api.OpDomains, struct{}{}, nil); e == nil || e.Code != "403" {
		t.Fatalf("bob: %+v, want 403", e)
	}
}
