package worker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// serveUnits serves several atomic units in one request
// (records.WorkBatch) and answers them in one reply. Each unit is run
// exactly as a request on the unit endpoint runs one: claimed before it
// runs and recorded before the answer, in its unit group
// (streams.UnitGroupKey), with a handler slot of its own (waiting for one
// at most half the caller's time left, then busy). What a batch saves is
// round trips, hand-offs and writes: one request and one reply for all,
// one claim write and one record write per group of units.
func (w *Worker) serveUnits(ctx context.Context, gate *drain.Gate, req micro.Request) {
	if !w.admit(gate, req) {
		return
	}
	defer gate.Leave()
	wb, err := records.Decode[records.WorkBatch](req.Data())
	if err != nil {
		_ = streams.Reply(w.nc, req.Reply(), nil, streams.WorkCodeBadRequest, err.Error())
		return
	}
	deadline := w.deadlineOf(req)
	gate.Go(func() {
		reps := w.runUnits(ctx, wb.Units, deadline)
		b, err := records.Encode(&records.WorkBatchReply{Replies: reps})
		if err != nil {
			_ = streams.Reply(w.nc, req.Reply(), nil, streams.WorkCodeInternal, err.Error())
			return
		}
		if err := streams.Reply(w.nc, req.Reply(), b, "", ""); err != nil {
			w.log.Warn("reply lost", "units", len(wb.Units), "err", err)
		}
	})
}

// runUnits runs units through their unit groups (runGrouped), each in a
// handler slot of its own.
func (w *Worker) runUnits(ctx context.Context, units []records.WorkRequest, deadline time.Time) []records.WorkReply {
	margin := min(time.Until(deadline)/10, time.Second)
	// The calls outlive ctx on purpose: shutdown drains calls in flight.
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(-margin))
	defer cancel()
	return w.runGrouped(cctx, units, func(u *records.WorkRequest) *records.WorkReply {
		return w.inSlot(ctx, deadline, func() *records.WorkReply { return w.observedUnit(cctx, u) })
	})
}

// inSlot runs fn in a handler slot, waiting for one at most half the time
// left before deadline; with none free by then the call is busy (not
// attempted).
func (w *Worker) inSlot(ctx context.Context, deadline time.Time, fn func() *records.WorkReply) *records.WorkReply {
	select {
	case w.sem <- struct{}{}:
	default:
		t := time.NewTimer(time.Until(deadline) / 2)
		defer t.Stop()
		select {
		case w.sem <- struct{}{}:
		case <-t.C:
			return w.saturated()
		case <-ctx.Done():
			return w.saturated()
		}
	}
	defer func() { <-w.sem }()
	return fn()
}
