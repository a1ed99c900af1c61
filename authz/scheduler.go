package authz

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
)

// The scheduler: every replica fires every schedule. Each period's batch
// is sent with the idempotency key of the schedule and the period
// (streams.ScheduleIdempotencyKey), so the replicas that send it, and a
// replica that sends it again after a restart, get the one batch; then
// the period is marked fired in the schedule's state, which only moves
// forward. The batch is sent before the mark, so a replica that dies
// between them leaves a period that is sent again (a duplicate) rather
// than one marked and never sent.
//
// Catch-up: periods fire in order, each once. A period that began more
// than catchUpGrace ago is skipped, unless it is the latest due: a replica
// that was only slow (or took over from one that died) fires every
// period, while after a time when no replica ran only the latest period
// missed fires, once. A schedule resumed fires the latest period that
// began while it was paused, and none of the older ones.

// Timing of the scheduler loop.
const (
	// maxScheduleWait bounds the loop's sleep, so that a wall clock that
	// jumped, or a change another replica made, is noticed.
	maxScheduleWait = time.Minute
	// scheduleRetry is the first delay before a period whose batch was not
	// sent is tried again; it doubles on each failure up to
	// maxScheduleRetry, and a try never waits past the next period.
	scheduleRetry    = time.Second
	maxScheduleRetry = time.Minute
	// scheduleSendWait bounds one period's send and its mark.
	scheduleSendWait = 30 * time.Second
	// catchUpGrace is how long ago a period may have begun and still fire
	// when a later one is due too (the catch-up policy).
	catchUpGrace = 10 * time.Second
)

// scheduler fires the table's schedules (the schedule loop), and answers
// the owner's schedule operations (schedules.go).
type scheduler struct {
	schedules jetstream.KeyValue
	store     *recordStore
	table     func() *Table
	now       func() time.Time
	log       *slog.Logger
	// submit sends a period's batch, as a send does.
	submit func(context.Context, *submission) (*api.SendReply, error)
	// wake makes the loop look again at once: a schedule resumed or the
	// table reloaded on this replica.
	wake chan struct{}
	// failures counts each schedule's consecutive failed tries (loop only).
	failures map[string]int
}

// poke wakes the schedule loop, if it sleeps.
func (sr *scheduler) poke() {
	select {
	case sr.wake <- struct{}{}:
	default:
	}
}

// run fires the table's schedules until ctx is done. A send in
// progress when ctx ends is finished (it has its own deadline).
func (sr *scheduler) run(ctx context.Context) error {
	for {
		next := sr.fireDue(ctx)
		if ctx.Err() != nil {
			return nil
		}
		d := min(max(next.Sub(sr.now()), 0), maxScheduleWait)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		case <-sr.wake:
			t.Stop()
		}
	}
}

// fireDue fires each schedule of the table in force whose period is due,
// and returns when the loop should look again.
func (sr *scheduler) fireDue(ctx context.Context) time.Time {
	t := sr.table()
	names := make([]string, 0, len(t.Schedules))
	for n := range t.Schedules {
		names = append(names, n)
	}
	sort.Strings(names)
	now := sr.now()
	next := now.Add(maxScheduleWait)
	for _, n := range names {
		if ctx.Err() != nil {
			break
		}
		if at := sr.fireSchedule(ctx, t, n, t.Schedules[n], now); at.Before(next) {
			next = at
		}
	}
	return next
}

// fireSchedule fires the period of schedule name that is due (due),
// if the schedule is not paused, and returns when to look at the schedule
// again: at once when another period is due too.
func (sr *scheduler) fireSchedule(ctx context.Context, t *Table, name string, sc *Schedule, now time.Time) time.Time {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), scheduleSendWait)
	defer cancel()
	st, err := sr.scheduleState(ctx, name, sc, now)
	if err != nil {
		return sr.scheduleFailed(name, sc, now, "schedule state not read", err)
	}
	if st.Paused {
		return sc.timing.next(now)
	}
	p, latest, ok := due(sc.timing, st, now)
	if !ok {
		delete(sr.failures, name)
		return sc.timing.next(now)
	}
	id, err := sr.sendPeriod(ctx, t, name, sc, p)
	if err != nil {
		return sr.scheduleFailed(name, sc, now, "scheduled batch not sent", err, "period", p)
	}
	advanced, err := sr.markFired(ctx, name, sc, p, id)
	if err != nil {
		return sr.scheduleFailed(name, sc, now, "scheduled batch sent, period not marked fired", err, "period", p, "batch_id", id)
	}
	delete(sr.failures, name)
	if advanced {
		attrs := []any{"schedule", name, "period", p, "batch_id", id}
		if first := sc.timing.next(periodFloor(st)); first.Before(p) {
			// Missed while no replica ran: only the latest fired.
			attrs = append(attrs, "skipped_from", first)
		}
		sr.log.Info("schedule fired", attrs...)
	}
	if p.Before(latest) {
		return now
	}
	return sc.timing.next(now)
}

// due is the period of a schedule with timing tm and state st to fire at
// now, and the latest period due; ok is false when none is due. It is the
// first period after the last fired if that began at most catchUpGrace
// ago, else the latest (the catch-up policy).
func due(tm *timing, st records.ScheduleState, now time.Time) (p, latest time.Time, ok bool) {
	floor := periodFloor(st)
	latest, ok = tm.latest(floor, now)
	if !ok {
		return time.Time{}, time.Time{}, false
	}
	if first := tm.next(floor); first.Before(latest) && !first.Before(now.Add(-catchUpGrace)) {
		return first, latest, true
	}
	return latest, latest, true
}

// scheduleFailed logs a failed try of schedule name and returns when to
// try again: after a delay that doubles with each failure in a row, and
// never past the next period.
func (sr *scheduler) scheduleFailed(name string, sc *Schedule, now time.Time, msg string, err error, attrs ...any) time.Time {
	n := sr.failures[name]
	sr.failures[name] = n + 1
	sr.log.Warn(msg, append([]any{"schedule", name, "err", logging.Cap(err.Error(), api.MaxErrorMessage), "tries", n + 1}, attrs...)...)
	retry := now.Add(min(scheduleRetry<<min(n, 10), maxScheduleRetry))
	if next := sc.timing.next(now); !next.IsZero() && next.Before(retry) {
		retry = next
	}
	return retry
}

// sendPeriod sends schedule name's batch for period p, as its user, and
// returns the batch's id: the one already sent for p when another replica
// (or an earlier try) sent it.
func (sr *scheduler) sendPeriod(ctx context.Context, t *Table, name string, sc *Schedule, p time.Time) (uint64, error) {
	l := t.Labels[sc.Label] // the table's validation checked the label
	idem := streams.ScheduleIdempotencyKey(name, p)
	if err := t.allowedTypes(l.Domain, sc.calls); err != nil {
		return 0, err
	}
	rep, err := sr.submit(ctx, &submission{label: sc.Label, l: l, user: sc.User, calls: sc.calls, key: sc.Key, idem: idem, prio: sc.priority(l)})
	if err == nil {
		return rep.ID, nil
	}
	// Refused, or cut short, yet the period may have its batch: recorded
	// by this try before a later step failed (authz queues it on its own),
	// or by a replica whose table said otherwise before a reload.
	if id, ok, ierr := sr.store.recordedUnder(ctx, sc.User, idem); ierr == nil && ok {
		return id, nil
	}
	return 0, err
}

// scheduleState reads schedule name's state, creating it when there is
// none and starting it afresh when the schedule's timing changed: only
// periods after now fire then.
func (sr *scheduler) scheduleState(ctx context.Context, name string, sc *Schedule, now time.Time) (records.ScheduleState, error) {
	var st records.ScheduleState
	_, err := streams.UpdateKV(ctx, sr.schedules, streams.ScheduleKey(name), func(cur []byte, exists bool) ([]byte, error) {
		st = records.ScheduleState{}
		if exists {
			var err error
			if st, err = records.DecodeScheduleState(cur); err != nil {
				return nil, err
			}
			if st.Spec == sc.timing.spec {
				return nil, nil
			}
		}
		st.Spec, st.Since = sc.timing.spec, now.UTC()
		return st.Encode(), nil
	})
	if err != nil {
		return st, fmt.Errorf("authz: schedule %s: %w", name, err)
	}
	return st, nil
}

// markFired records that period p of schedule name was fired with batch
// id, unless a later (or the same) period was recorded already; advanced
// says whether this call moved it.
func (sr *scheduler) markFired(ctx context.Context, name string, sc *Schedule, p time.Time, id uint64) (advanced bool, err error) {
	_, err = streams.UpdateKV(ctx, sr.schedules, streams.ScheduleKey(name), func(cur []byte, exists bool) ([]byte, error) {
		advanced = false
		st := records.ScheduleState{Spec: sc.timing.spec, Since: p}
		if exists {
			var err error
			if st, err = records.DecodeScheduleState(cur); err != nil {
				return nil, err
			}
		}
		if !st.Last.Before(p) {
			return nil, nil
		}
		st.Last, st.Batch, advanced = p.UTC(), id, true
		return st.Encode(), nil
	})
	if err != nil {
		return false, fmt.Errorf("authz: schedule %s: mark period %s fired: %w", name, p.UTC().Format(time.RFC3339), err)
	}
	return advanced, nil
}

// periodFloor is the time after which a schedule's periods may fire: its
// last period fired, or when its timing was first seen if that is later.
func periodFloor(st records.ScheduleState) time.Time {
	if st.Last.After(st.Since) {
		return st.Last
	}
	return st.Since
}
