package authz

import (
	"context"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// scheduledFor records a batch of alice's that runs at at and publishes
// its schedule.
func scheduledFor(t *testing.T, p *parts, sb *scheduledBatches, at time.Time) *pipeline.Batch {
	t.Helper()
	b := p.recordOnly(t, p.batch(func(b *pipeline.Batch) { b.RunAt = at.UTC() }))
	if err := sb.publishFirst(p.ctx, b, true); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestScheduledBatchesListAndEvict: a batch that waits for its run_at
// has a schedule and no token; the listing shows the waiting batches
// soonest first; an evicted one is Done as RemovedByOwner with its
// schedule purged and its callback published, and a position outside the
// list is refused. A batch whose run_at has passed gets its token at once.
func TestScheduledBatchesListAndEvict(t *testing.T) {
	p := newParts(t)
	sb := p.keyOrders().scheduled
	now := p.clock.Now()
	late := scheduledFor(t, p, sb, now.Add(2*time.Hour))
	soon := scheduledFor(t, p, sb, now.Add(time.Hour))
	past := scheduledFor(t, p, sb, now.Add(-time.Minute))
	if n := len(p.tokens(t, pipeline.Med, late.ID)) + len(p.tokens(t, pipeline.Med, soon.ID)); n != 0 {
		t.Fatalf("waiting batches have %d tokens", n)
	}
	if toks := p.tokens(t, pipeline.Med, past.ID); len(toks) != 1 {
		t.Fatalf("a batch whose run_at passed: tokens %v, want one", toks)
	}
	items, truncated, err := sb.list(p.ctx, "pay", pipeline.Med, 0)
	if err != nil || truncated || len(items) != 2 || items[0].ID != soon.ID || items[1].ID != late.ID || items[0].State != api.StateScheduled {
		t.Fatalf("listing: %+v, truncated %v, %v; want %d then %d", items, truncated, err, soon.ID, late.ID)
	}
	if items, truncated, _ := sb.list(p.ctx, "pay", pipeline.Med, 1); len(items) != 1 || !truncated {
		t.Fatalf("listing of at most 1: %+v, truncated %v", items, truncated)
	}

	if _, err := sb.evict(p.ctx, &api.PositionRequest{Domain: "pay", Priority: pipeline.Med, Position: 2}); codeOf(err) != api.CodeOutOfBounds {
		t.Fatalf("evict past the end: %v, want %d", err, api.CodeOutOfBounds)
	}
	out, err := sb.evict(p.ctx, &api.PositionRequest{Domain: "pay", Priority: pipeline.Med, Position: 1})
	if err != nil || out.(*api.EvictReply).ID != late.ID {
		t.Fatalf("evict position 1: %v, %v; want %d", out, err, late.ID)
	}
	if !p.removedBy(t, late) {
		t.Fatalf("evicted scheduled batch: progress %+v, callbacks %+v", p.loadProgress(t, late), p.callbacks(t, late.ID))
	}
	if items, _, _ := sb.list(p.ctx, "pay", pipeline.Med, 0); len(items) != 1 || items[0].ID != soon.ID {
		t.Fatalf("listing after the evict: %+v", items)
	}
	info, err := p.h.scheduled.Info(p.ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("SCHEDULED holds %v schedules (%v), want the one left", info.State.Msgs, err)
	}
}

// TestDueForwarderAlone: the forwarder started on the real consumer puts
// a schedule that fired on its batch's queue (one token), and one whose
// batch was removed meanwhile gets none; once ctx ends, run returns.
func TestDueForwarderAlone(t *testing.T) {
	p := newParts(t)
	sb := p.keyOrders().scheduled
	at := time.Now().Add(time.Second)
	b := scheduledFor(t, p, sb, at)
	gone := scheduledFor(t, p, sb, at)
	st := p.loadProgress(t, gone)
	if err := sb.removal.markRemoved(p.ctx, gone, st, ""); err != nil {
		t.Fatal(err)
	}

	f := &dueForwarder{batches: sb, due: p.h.due}
	ctx, cancel := context.WithCancel(p.ctx)
	defer cancel()
	if err := f.start(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = f.run(ctx) }()
	testnats.Eventually(t, 20*time.Second, "the fired schedule's token", func() bool { return len(p.tokens(t, pipeline.Med, b.ID)) == 1 })
	testnats.Eventually(t, 20*time.Second, "both schedules taken", func() bool {
		info, err := p.h.due.Info(p.ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Consumer >= 2
	})
	cancel()
	testnats.Stopped(t, "the forwarder", done)
	if toks := p.tokens(t, pipeline.Med, b.ID); len(toks) != 1 || toks[0] != [2]uint32{0, 0} {
		t.Fatalf("forwarded batch's tokens %v, want its first", toks)
	}
	if toks := p.tokens(t, pipeline.Med, gone.ID); len(toks) != 0 {
		t.Fatalf("the removed batch got tokens %v", toks)
	}
}
