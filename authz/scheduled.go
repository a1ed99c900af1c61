package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// Scheduled batches. A send with run_at or delay records its batch at once
// and gives it, instead of a queue token, a schedule in the SCHEDULED
// stream (streams.ScheduleMsg): its first token, which the server
// publishes to streams.DueSubject at the batch's RunAt. authz forwards it
// from there to the batch's queue (forwardDue), and the batch runs as any
// other. The server keeps the schedule through restarts; nothing polls.
// A keyed batch joins its key's order when it is sent, as any other, and
// gets its schedule when it is its key's head. Cancel and evict remove the
// schedule by its subject; a fired one that is on its way is dropped by
// the processor, which reads a scheduled batch's progress before its first
// step.

// DefaultMaxDelay is Label.MaxDelay when the label sets none.
const DefaultMaxDelay = 30 * 24 * time.Hour

// DelayBound is the furthest ahead a send under the label may schedule a
// batch.
func (l *Label) DelayBound() time.Duration {
	if l.MaxDelay > 0 {
		return l.MaxDelay.D()
	}
	return DefaultMaxDelay
}

// runAt reads a send's run_at (RFC 3339) or delay (a Go duration) at now:
// the zero time for neither, or for a time not after now (the batch runs
// at once). Both, a malformed value, a negative delay or a time past the
// label's bound (DelayBound) are 400s that say so.
func (l *Label) runAt(label, runAt, delay string, now time.Time) (time.Time, error) {
	var at time.Time
	switch {
	case runAt != "" && delay != "":
		return time.Time{}, errf(api.CodeBadRequest, "authz: give run_at or delay, not both")
	case runAt != "":
		t, err := time.Parse(time.RFC3339Nano, runAt)
		if err != nil {
			return time.Time{}, errf(api.CodeBadRequest, "authz: run_at %q: expected an RFC 3339 time such as 2030-01-02T15:04:05Z", logging.Capped(runAt))
		}
		at = t
	case delay != "":
		d, err := time.ParseDuration(delay)
		if err != nil {
			return time.Time{}, errf(api.CodeBadRequest, "authz: delay %q: expected a duration such as 90s, 15m or 2h", logging.Capped(delay))
		}
		if d < 0 {
			return time.Time{}, errf(api.CodeBadRequest, "authz: delay %s: must not be negative", d)
		}
		at = now.Add(d)
	default:
		return time.Time{}, nil
	}
	if !at.After(now) {
		return time.Time{}, nil
	}
	if bound := l.DelayBound(); at.Sub(now) > bound {
		return time.Time{}, errf(api.CodeBadRequest, "authz: the batch would run %s from now; label %q schedules at most %s ahead (max_delay)", at.Sub(now).Round(time.Second), label, bound)
	}
	return at.UTC(), nil
}

// scheduledBatches keeps the batches sent to run later: it publishes a
// batch's schedule, forwards the schedules that fired to their queues, and
// lists and evicts the batches that wait.
type scheduledBatches struct {
	js        jetstream.JetStream
	acks      *jsapi.AckPublisher
	scheduled jetstream.Stream
	// due delivers the schedules that fired (forwardDue).
	due      jetstream.Consumer
	progress *streams.ProgressStore
	store    *recordStore
	removal  *remover
	now      func() time.Time
	log      *slog.Logger
	// startHead queues a batch whose schedule fired (keyOrders.startHead).
	startHead func(ctx context.Context, b *pipeline.Batch, due bool) (done bool, err error)
}

// publishFirst publishes the first token of b, which never ran: to its
// queue, or, while b waits for its RunAt, as its schedule. acked publishes
// through the service's pipelined publisher: a send's own path, the first
// publish of that token. Any other may publish it beside one stored before
// (a repeat, the repair loop, authz's start, a key's head): its token is
// marked so that its step reads the progress (submit.PublishFirstAgain).
func (sb *scheduledBatches) publishFirst(ctx context.Context, b *pipeline.Batch, acked bool) error {
	if !b.Scheduled(sb.now()) {
		if acked {
			return submit.PublishTokenAcked(ctx, sb.js, sb.acks, b, 0, 0)
		}
		return submit.PublishFirstAgain(ctx, sb.js, b)
	}
	m, err := streams.ScheduleMsg(b)
	if err != nil {
		return err
	}
	if acked {
		_, err = submit.PublishAcked(ctx, sb.js, sb.acks, m)
	} else {
		_, err = submit.Publish(ctx, sb.js, m)
	}
	if err != nil {
		return fmt.Errorf("authz: schedule batch %d: %w", b.ID, err)
	}
	return nil
}

// forwardDue puts the token of a fired schedule on its batch's queue
// (startHead: a batch removed meanwhile has its removal finished instead),
// then acknowledges it. A token that does not decode, or whose batch has
// no record, is dropped with a log line: only authz writes the stream.
func (sb *scheduledBatches) forwardDue(ctx context.Context, m jetstream.Msg) {
	tok, err := records.Decode[records.Token](m.Data())
	if err != nil {
		sb.log.Error("fired schedule does not decode: dropped", "err", err)
		_ = m.Term()
		return
	}
	b := tok.Batch
	if b == nil || b.ID != tok.BatchID {
		rec, err := sb.store.record(ctx, tok.BatchID)
		if ae := (*Error)(nil); errors.As(err, &ae) && ae.Code == api.CodeNotFound {
			sb.log.Warn("fired schedule of a batch without a record: dropped", "batch_id", tok.BatchID)
			_ = m.Term()
			return
		}
		if err != nil {
			sb.log.Warn("fired schedule not forwarded; redelivered", "batch_id", tok.BatchID, "err", err)
			_ = m.NakWithDelay(time.Second)
			return
		}
		b = &rec.Batch
	}
	if _, err := sb.startHead(ctx, b, true); err != nil {
		sb.log.Warn("fired schedule not forwarded; redelivered", "batch_id", b.ID, "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	if err := m.DoubleAck(ctx); err != nil {
		// Redelivered: the token's deduplication id drops the copy within
		// the window, and a processor drops one that comes after its batch ran.
		sb.log.Warn("fired schedule forwarded, not acknowledged", "batch_id", b.ID, "err", err)
	}
}

// Schedules returns the batches of a domain's queue of one priority that
// wait for their run_at, soonest first (State api.StateScheduled, Position
// their place in this list); it reads at most max schedules (0: all) and
// says when it stopped there. One direct get per schedule and one
// progress read each: a batch removed meanwhile is left out.
func (s *Service) Schedules(ctx context.Context, domain string, p pipeline.Priority, max int) (items []api.QueueItem, truncated bool, err error) {
	return s.scheduledBatches.list(ctx, domain, p, max)
}

// list is Service.Schedules.
func (sb *scheduledBatches) list(ctx context.Context, domain string, p pipeline.Priority, max int) (items []api.QueueItem, truncated bool, err error) {
	filter := streams.ScheduleFilter(p, domain)
	for seq, read := uint64(1), 0; ; read++ {
		if max > 0 && read == max {
			truncated = true
			break
		}
		rm, err := sb.scheduled.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, false, fmt.Errorf("authz: read the schedules of %s's %s queue: %w", domain, p, err)
		}
		seq = rm.Sequence + 1
		tok, err := records.Decode[records.Token](rm.Data)
		if err != nil || tok.Batch == nil || tok.Batch.ID != tok.BatchID {
			if err == nil {
				rec, rerr := sb.store.record(ctx, tok.BatchID)
				if rerr != nil {
					continue // gone: finished, or never recorded
				}
				tok.Batch = &rec.Batch
			} else {
				continue
			}
		}
		pr, err := sb.progress.Load(ctx, domain, tok.BatchID)
		if err != nil {
			return nil, false, err
		}
		if pr.Rev != 0 {
			continue // removed (its schedule's purge cut short), or running
		}
		items = append(items, api.QueueItem{ID: tok.BatchID, Seq: rm.Sequence, Subject: rm.Subject, State: api.StateScheduled,
			Key: tokenKey(tok), RunAt: tok.Batch.RunAt})
	}
	slices.SortStableFunc(items, func(a, b api.QueueItem) int {
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return cmpID(a.ID, b.ID)
	})
	for i := range items {
		items[i].Position = i
	}
	return items, truncated, nil
}

// evict removes the batch at a position of a queue's scheduled
// batches (Schedules) before it runs, as evict does a queued one (see
// Removal): its progress, then its schedule, then its callback.
func (sb *scheduledBatches) evict(ctx context.Context, req *api.PositionRequest) (any, error) {
	for range 10 {
		items, _, err := sb.list(ctx, req.Domain, req.Priority, 0)
		if err != nil {
			return nil, err
		}
		if req.Position < 0 || req.Position >= len(items) {
			return nil, errf(api.CodeOutOfBounds, "authz: index out of bounds: position %d of %d scheduled batches", req.Position, len(items))
		}
		it := items[req.Position]
		st, err := sb.progress.Load(ctx, req.Domain, it.ID)
		if err != nil {
			return nil, err
		}
		if st.Rev != 0 {
			continue // it started, or was removed, meanwhile: look again
		}
		rec, err := sb.store.record(ctx, it.ID)
		if err != nil {
			return nil, err
		}
		if err := sb.removal.markRemoved(ctx, &rec.Batch, st, ""); errors.Is(err, streams.ErrConflict) {
			continue
		} else if err != nil {
			return nil, err
		}
		// Its schedule may have fired meanwhile: its token is deleted too.
		seqs, err := sb.removal.tokensOf(ctx, &rec.Batch)
		if err != nil {
			return nil, err
		}
		dup, err := sb.removal.retireRemoved(ctx, &rec.Batch, st, seqs)
		if err != nil {
			return nil, err
		}
		if dup {
			return nil, errf(api.CodeConflict, "authz: batch %d finished before it could be evicted", it.ID)
		}
		sb.log.Info("scheduled batch evicted", "batch_id", it.ID, "domain", req.Domain, "position", req.Position)
		return &api.EvictReply{ID: it.ID}, nil
	}
	return nil, errf(api.CodeConflict, "authz: the scheduled batches kept changing; try again")
}
