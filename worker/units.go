package worker

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/streams"
)

// serveUnits serves several atomic units in one request
// (streams.WorkBatch) and answers them in one reply. Each unit is run
// exactly as a request on the unit endpoint runs one: its own completion
// key, claimed before it runs and turned into its record before the
// answer, a handler slot of its own (waiting for one at most half the
// caller's time left, then busy). What a batch saves is round trips and
// hand-offs: one request and one reply for all, the claims published
// together and their PubAcks awaited together, and likewise the records.
func (w *Worker) serveUnits(ctx context.Context, gate *drain.Gate, req micro.Request) {
	if !w.admit(gate, req) {
		return
	}
	defer gate.Leave()
	wb, err := streams.Decode[streams.WorkBatch](req.Data())
	if err != nil {
		_ = streams.Reply(w.nc, req.Reply(), nil, streams.WorkCodeBadRequest, err.Error())
		return
	}
	deadline := w.deadlineOf(req)
	gate.Go(func() {
		reps := w.runUnits(ctx, wb.Units, deadline)
		b, err := streams.Encode(&streams.WorkBatchReply{Replies: reps})
		if err != nil {
			_ = streams.Reply(w.nc, req.Reply(), nil, streams.WorkCodeInternal, err.Error())
			return
		}
		if err := streams.Reply(w.nc, req.Reply(), b, "", ""); err != nil {
			w.log.Warn("reply lost", "units", len(wb.Units), "err", err)
		}
	})
}

// runUnits runs units as once runs each, with the first claim write of
// every unit and the record writes published together (pipelined)
// rather than one round trip after the other. Every claim is the same
// compare-and-set as once's; a unit whose first claim write finds the key
// held before goes the contested way (claim), and a record write that
// failed goes the patient way (record).
func (w *Worker) runUnits(ctx context.Context, units []streams.WorkRequest, deadline time.Time) []streams.WorkReply {
	margin := min(time.Until(deadline)/10, time.Second)
	// The calls outlive ctx on purpose: shutdown drains calls in flight.
	cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline.Add(-margin))
	defer cancel()
	reps := make([]streams.WorkReply, len(units))
	until, claim, rep := w.claimFor(cctx)
	if rep != nil {
		for i := range reps {
			reps[i] = *rep
		}
		return reps
	}
	type unitState struct {
		key   string
		claim *streams.PendingAck
		err   error
		rev   uint64
		fresh bool
		done  []byte
		rec   *streams.PendingAck
	}
	st := make([]unitState, len(units))
	for i := range units {
		st[i].key = unitKey(&units[i])
		st[i].claim, st[i].err = w.pub.Publish(streams.KVUpdateMsg(streams.BucketResults, st[i].key, claim, 0))
	}
	// One bound for the PubAcks of the claims, rather than a timer each.
	actx, acancel := context.WithTimeout(cctx, kvTimeout)
	defer acancel()
	var wg sync.WaitGroup
	for i := range units {
		wg.Go(func() {
			u, s := &units[i], &st[i]
			if s.err == nil {
				s.rev, s.err = s.claim.Wait(actx)
			}
			var early *streams.WorkReply
			if s.err == nil {
				s.fresh = true
			} else {
				kctx, kcancel := context.WithTimeout(cctx, 2*kvTimeout)
				s.rev, s.fresh, early = w.contested(kctx, s.key, claim, s.err)
				kcancel()
			}
			if early != nil {
				reps[i] = *early
				return
			}
			r := w.inSlot(ctx, deadline, func() *streams.WorkReply { return w.observedUnit(cctx, u) })
			if s.done, r = w.completion(cctx, u, s.key, s.rev, until, r); s.done != nil {
				s.rec, s.err = w.pub.Publish(w.recordMsg(s.key, s.done, s.rev))
			}
			reps[i] = *r
		})
	}
	wg.Wait()
	// Likewise one bound for the PubAcks of the records.
	rctx, rcancel := context.WithTimeout(cctx, kvTimeout)
	defer rcancel()
	for i := range st {
		s := &st[i]
		if s.done == nil {
			continue
		}
		if s.err == nil {
			_, s.err = s.rec.Wait(rctx)
		}
		if s.err == nil {
			reps[i].Fresh = s.fresh
			continue
		}
		wg.Go(func() {
			if w.record(cctx, s.key, s.done, s.rev, until) {
				reps[i].Fresh = s.fresh
			}
		})
	}
	wg.Wait()
	return reps
}

// inSlot runs fn in a handler slot, waiting for one at most half the time
// left before deadline; with none free by then the call is busy (not
// attempted).
func (w *Worker) inSlot(ctx context.Context, deadline time.Time, fn func() *streams.WorkReply) *streams.WorkReply {
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
