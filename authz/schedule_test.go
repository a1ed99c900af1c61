package authz_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// sendAt sends one noop under jobs as alice, scheduled by req's RunAt or
// Delay, and returns the reply.
func (b *bundle) sendAt(t *testing.T, req api.SendRequest) *api.SendReply {
	t.Helper()
	req.Label, req.Functions = "jobs", api.Calls{noop()}
	return answered(t, "send", func() (*api.SendReply, error) { return b.client(t, "alice").Send(b.ctx, req) })
}

// runsNotBefore ticks the processor until batch id is terminal, failing
// the test if its function was called before runAt: a call seen at a
// moment before runAt happened before it.
func (b *bundle) runsNotBefore(t *testing.T, id uint64, runAt time.Time) *api.BatchRecord {
	t.Helper()
	call := fmt.Sprintf("%d/0", id)
	var rec *api.BatchRecord
	testnats.Eventually(t, 20*time.Second, fmt.Sprintf("batch %d settled", id), func() bool {
		b.proc.Tick(b.ctx, 8)
		n := b.calls.get(call)
		if now := time.Now(); n > 0 && now.Before(runAt) {
			t.Fatalf("batch %d ran at %s, before its run_at %s", id, now.Format(time.RFC3339Nano), runAt.Format(time.RFC3339Nano))
		}
		rec = b.record(t, id)
		return rec.Status.Terminal()
	})
	if n := b.calls.get(call); n != 1 {
		t.Fatalf("batch %d's function ran %d times, want 1", id, n)
	}
	if rec.UpdatedAt.Before(runAt) {
		t.Fatalf("batch %d finished at %s, before its run_at %s", id, rec.UpdatedAt, runAt)
	}
	return rec
}

// TestScheduledBatchRunsAtItsTime: a batch sent with a delay is recorded at
// once, listed as scheduled by batch, list, queue and inflight, not in the
// queue's order, and runs once, not before its run_at, with its expiry
// counted from then.
func TestScheduledBatchRunsAtItsTime(t *testing.T) {
	b := setup(t)
	before := time.Now()
	rep := b.sendAt(t, api.SendRequest{Delay: "2s"})
	if rep.RunAt.Before(before.Add(2 * time.Second)) {
		t.Fatalf("run_at %s: want at least 2s after the send (%s)", rep.RunAt, before)
	}
	// Sent at once, for comparison: it runs, the scheduled one waits.
	now := b.send(t, "alice", "jobs", noop())

	got := answered(t, "batch", func() (*api.BatchReply, error) {
		return b.client(t, "alice").Batch(b.ctx, api.IDRequest{ID: rep.ID})
	})
	if !got.Scheduled || !got.Record.Batch.RunAt.Equal(rep.RunAt) || got.Record.Status != pipeline.InProcess {
		t.Fatalf("batch: scheduled %v, run_at %s, status %s; want scheduled at %s, InProcess", got.Scheduled, got.Record.Batch.RunAt, got.Record.Status, rep.RunAt)
	}
	if h := got.Record.History; len(h) < 2 || h[1].What != "scheduled" {
		t.Fatalf("history %+v: want a scheduled event", h)
	}
	list := answered(t, "list", func() (*api.ListReply, error) {
		return b.client(t, "alice").List(b.ctx, api.ListRequest{})
	})
	found := false
	for _, it := range list.Items {
		if it.ID == rep.ID {
			found = it.Scheduled && it.RunAt.Equal(rep.RunAt)
		}
	}
	if !found {
		t.Fatalf("list %+v: want batch %d scheduled at %s", list.Items, rep.ID, rep.RunAt)
	}
	q := answered(t, "queue", func() (*api.QueueReply, error) {
		return b.client(t, "owner").Queue(b.ctx, api.QueueRequest{Domain: domain, Priority: pipeline.Med})
	})
	if len(q.Scheduled) != 1 || q.Scheduled[0].ID != rep.ID || q.Scheduled[0].State != api.StateScheduled || !q.Scheduled[0].RunAt.Equal(rep.RunAt) {
		t.Fatalf("queue's scheduled %+v: want batch %d at %s", q.Scheduled, rep.ID, rep.RunAt)
	}
	for _, it := range q.Items {
		if it.ID == rep.ID {
			t.Fatalf("queue items %+v: the scheduled batch is in the queue's order before its time", q.Items)
		}
	}
	fl := answered(t, "inflight", func() (*api.InFlightReply, error) {
		return b.client(t, "owner").InFlight(b.ctx, api.InFlightRequest{Domain: domain})
	})
	found = false
	for _, it := range fl.Items {
		if it.ID == rep.ID {
			found = it.State == api.StateScheduled && it.RunAt.Equal(rep.RunAt) && it.Submitter == "alice"
		}
	}
	if !found {
		t.Fatalf("inflight %+v: want batch %d scheduled", fl.Items, rep.ID)
	}

	if rec := b.settled(t, now); rec.Status != pipeline.Executed {
		t.Fatalf("batch sent at once: %s", rec.Status)
	}
	rec := b.runsNotBefore(t, rep.ID, rep.RunAt)
	if rec.Status != pipeline.Executed {
		t.Fatalf("scheduled batch: %s, want Executed", rec.Status)
	}
}

// TestScheduledExpiryCountsFromRunAt: a label's expiry runs from the
// batch's run_at, not from its send.
func TestScheduledExpiryCountsFromRunAt(t *testing.T) {
	table, err := authz.ParseTable([]byte(tableYAML + `
  soon:
    domain: pay
    users: [alice]
    mode: atomic
    priority: med
    expiry: 1s
    max_delay: 1h
    functions:
      noop: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	b.stop()
	b.runAuthz(t, authz.Options{Table: table})
	rep := answered(t, "send", func() (*api.SendReply, error) {
		return b.client(t, "alice").Send(b.ctx, api.SendRequest{Label: "soon", Functions: api.Calls{noop()}, Delay: "30m"})
	})
	rec := b.record(t, rep.ID)
	if want := rep.RunAt.Add(time.Second); !rec.Batch.ExpiresAt.Equal(want) {
		t.Fatalf("expires_at %s, want run_at + expiry = %s", rec.Batch.ExpiresAt, want)
	}
}

// TestScheduledBatchSurvivesRestarts: a batch scheduled 2s ahead whose
// server, authz, worker and processor all stop before its time runs once,
// not before its run_at, when they are back.
func TestScheduledBatchSurvivesRestarts(t *testing.T) {
	b := setup(t)
	rep := b.sendAt(t, api.SendRequest{Delay: "2s"})
	b.stop()
	env := b.env
	env.Restart(t)
	b = setupOn(t, env)
	q := answered(t, "queue", func() (*api.QueueReply, error) {
		return b.client(t, "owner").Queue(b.ctx, api.QueueRequest{Domain: domain, Priority: pipeline.Med})
	})
	if time.Now().Before(rep.RunAt) && (len(q.Scheduled) != 1 || q.Scheduled[0].ID != rep.ID) {
		t.Fatalf("after the restart, before its time: scheduled %+v, want batch %d", q.Scheduled, rep.ID)
	}
	if rec := b.runsNotBefore(t, rep.ID, rep.RunAt); rec.Status != pipeline.Executed {
		t.Fatalf("scheduled batch after restarts: %s, want Executed", rec.Status)
	}
}

// TestCancelScheduledBatch: a scheduled batch cancelled before its time
// never runs, has one callback (RemovedByOwner), and its schedule is gone;
// one evicted by the owner from the queue's scheduled list likewise.
func TestCancelScheduledBatch(t *testing.T) {
	b := setup(t)
	testnats.KeepCallbacks(t, b.env.JS(t, "admin"))
	cancelled := b.sendAt(t, api.SendRequest{Delay: "2s"})
	evicted := b.sendAt(t, api.SendRequest{Delay: "3s"})
	control := b.sendAt(t, api.SendRequest{Delay: "3s"})
	c := answered(t, "cancel", func() (*api.CancelReply, error) {
		return b.client(t, "alice").Cancel(b.ctx, api.IDRequest{ID: cancelled.ID})
	})
	if c.Status != pipeline.RemovedByOwner {
		t.Fatalf("cancel: %+v", c)
	}
	q := answered(t, "queue", func() (*api.QueueReply, error) {
		return b.client(t, "owner").Queue(b.ctx, api.QueueRequest{Domain: domain, Priority: pipeline.Med})
	})
	if len(q.Scheduled) != 2 || q.Scheduled[0].ID != evicted.ID || q.Scheduled[1].ID != control.ID {
		t.Fatalf("scheduled after the cancel: %+v, want %d then %d", q.Scheduled, evicted.ID, control.ID)
	}
	ev := answered(t, "evict", func() (*api.EvictReply, error) {
		return b.client(t, "owner").Evict(b.ctx, api.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: 0, Scheduled: true})
	})
	if ev.ID != evicted.ID {
		t.Fatalf("evicted %d, want %d", ev.ID, evicted.ID)
	}
	// The control batch runs after both others' times: had their schedules
	// fired, their tokens would be in the queue by now.
	b.runsNotBefore(t, control.ID, control.RunAt)
	for _, id := range []uint64{cancelled.ID, evicted.ID} {
		if rec := b.settled(t, id); rec.Status != pipeline.RemovedByOwner {
			t.Fatalf("batch %d: %s, want RemovedByOwner", id, rec.Status)
		}
		if n := b.calls.get(fmt.Sprintf("%d/0", id)); n != 0 {
			t.Fatalf("removed batch %d ran %d times", id, n)
		}
	}
	for range 5 {
		b.proc.Tick(b.ctx, 8)
	}
	cbs := testnats.Callbacks(t, b.env.JS(t, "admin"))
	for _, id := range []uint64{cancelled.ID, evicted.ID} {
		if n := len(cbs[id]); n != 1 {
			t.Fatalf("batch %d has %d callbacks, want 1", id, n)
		}
	}
	if msgs := testnats.Messages(t, b.env.JS(t, "admin"), streams.StreamScheduled); len(msgs) != 0 {
		t.Fatalf("SCHEDULED holds %d messages after every schedule ran or was removed", len(msgs))
	}
}

// TestBadSchedules: run_at and delay are read strictly and bounded by the
// label's max_delay; each mistake is a 400 that says what was wrong, and
// nothing is recorded. A time in the past runs at once.
func TestBadSchedules(t *testing.T) {
	b := setup(t)
	tests := []struct {
		name  string
		req   api.SendRequest
		wants string
	}{
		{name: "both", req: api.SendRequest{RunAt: time.Now().Add(time.Hour).Format(time.RFC3339), Delay: "1h"}, wants: "not both"},
		{name: "run_at not RFC 3339", req: api.SendRequest{RunAt: "tomorrow"}, wants: "RFC 3339"},
		{name: "run_at without zone", req: api.SendRequest{RunAt: "2030-01-02T15:04:05"}, wants: "RFC 3339"},
		{name: "delay not a duration", req: api.SendRequest{Delay: "5 minutes"}, wants: "duration"},
		{name: "delay without unit", req: api.SendRequest{Delay: "60"}, wants: "duration"},
		{name: "negative delay", req: api.SendRequest{Delay: "-5m"}, wants: "negative"},
		{name: "beyond max_delay", req: api.SendRequest{Delay: "721h"}, wants: "max_delay"},
		{name: "run_at beyond max_delay", req: api.SendRequest{RunAt: "9999-12-31T23:59:59Z"}, wants: "720h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Label, tt.req.Functions = "jobs", api.Calls{noop()}
			e := b.call(t, "alice", "send", tt.req, nil)
			if e == nil || e.Code != "400" || !strings.Contains(e.Msg, tt.wants) {
				t.Fatalf("send %+v: %+v, want a 400 saying %q", tt.req, e, tt.wants)
			}
		})
	}
	if msgs := testnats.Messages(t, b.env.JS(t, "admin"), streams.StreamScheduled); len(msgs) != 0 {
		t.Fatalf("refused sends left %d schedules", len(msgs))
	}
	past := b.sendAt(t, api.SendRequest{RunAt: time.Now().Add(-time.Hour).Format(time.RFC3339)})
	if !past.RunAt.IsZero() {
		t.Fatalf("a run_at in the past: reply run_at %s, want none (runs at once)", past.RunAt)
	}
	if q := b.queue(t, pipeline.Med); !equal(q, []uint64{past.ID}) {
		t.Fatalf("queue %v, want the batch with a past run_at queued at once", q)
	}
}

// TestFiredScheduleOfCancelledBatch: a schedule that fires as its batch is
// cancelled puts the batch's first token in the queue after the cancel
// looked there. The processor reads a scheduled batch's progress before
// its first step, so the batch does not run, and keeps its one callback.
func TestFiredScheduleOfCancelledBatch(t *testing.T) {
	b := setup(t)
	testnats.KeepCallbacks(t, b.env.JS(t, "admin"))
	rep := b.sendAt(t, api.SendRequest{Delay: "1s"})
	answered(t, "cancel", func() (*api.CancelReply, error) {
		return b.client(t, "alice").Cancel(b.ctx, api.IDRequest{ID: rep.ID})
	})
	rec := b.record(t, rep.ID)
	testnats.Eventually(t, 5*time.Second, "run_at passed", func() bool { return time.Now().After(rep.RunAt) })
	// The token the schedule would have fired, forwarded late.
	if err := submit.PublishToken(b.ctx, b.env.JS(t, "admin"), &rec.Batch, 0, 0); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "the late token dropped", func() bool {
		b.proc.Tick(b.ctx, 8)
		return len(b.queue(t, pipeline.Med)) == 0 && len(testnats.Messages(t, b.env.JS(t, "admin"), streams.StreamMed)) == 0
	})
	if n := b.calls.get(fmt.Sprintf("%d/0", rep.ID)); n != 0 {
		t.Fatalf("the cancelled batch ran %d times", n)
	}
	if rec := b.settled(t, rep.ID); rec.Status != pipeline.RemovedByOwner {
		t.Fatalf("cancelled batch: %s", rec.Status)
	}
	if n := len(testnats.Callbacks(t, b.env.JS(t, "admin"))[rep.ID]); n != 1 {
		t.Fatalf("%d callbacks, want 1", n)
	}
}

// TestScheduledKeyedBatchHoldsItsKey: a keyed batch joins its key's order
// when it is sent, scheduled or not: a batch of the same key sent after
// it runs after it, even though it could run at once.
func TestScheduledKeyedBatchHoldsItsKey(t *testing.T) {
	b := setup(t)
	first := b.sendAt(t, api.SendRequest{Key: "acct-1", Delay: "2s"})
	second := b.sendAt(t, api.SendRequest{Key: "acct-1"})
	other := b.sendAt(t, api.SendRequest{Key: "acct-2"})
	if rec := b.settled(t, other.ID); rec.Status != pipeline.Executed {
		t.Fatalf("batch of another key: %s", rec.Status)
	}
	testnats.Eventually(t, 20*time.Second, "both batches of the key settled", func() bool {
		b.proc.Tick(b.ctx, 8)
		if b.calls.get(fmt.Sprintf("%d/0", second.ID)) > 0 && b.calls.get(fmt.Sprintf("%d/0", first.ID)) == 0 {
			t.Fatalf("batch %d ran before batch %d, the scheduled head of its key", second.ID, first.ID)
		}
		return b.record(t, second.ID).Status.Terminal()
	})
	one, two := b.record(t, first.ID), b.record(t, second.ID)
	if one.Status != pipeline.Executed || two.Status != pipeline.Executed || two.UpdatedAt.Before(one.UpdatedAt) || one.UpdatedAt.Before(first.RunAt) {
		t.Fatalf("first %s at %s (run_at %s), second %s at %s: want both executed, in order, the first not before its run_at",
			one.Status, one.UpdatedAt, first.RunAt, two.Status, two.UpdatedAt)
	}
}
