package authz

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
)

// The owner's schedule operations: schedules lists them, pause_schedule
// and resume_schedule stop and restart one for every replica.

func (sr *scheduler) listSchedules(ctx context.Context, _ string, _ *struct{}) (any, error) {
	t := sr.table()
	names := make([]string, 0, len(t.Schedules))
	for n := range t.Schedules {
		names = append(names, n)
	}
	sort.Strings(names)
	now := sr.now()
	rep := &api.SchedulesReply{Schedules: make([]api.ScheduleInfo, 0, len(names))}
	for _, n := range names {
		sc := t.Schedules[n]
		st, err := sr.readScheduleState(ctx, n)
		if err != nil {
			return nil, err
		}
		rep.Schedules = append(rep.Schedules, scheduleInfo(t, n, sc, st, now))
	}
	return rep, nil
}

func (sr *scheduler) pauseSchedule(ctx context.Context, user string, req *api.ScheduleRequest) (any, error) {
	return sr.setSchedulePaused(ctx, user, req, true)
}

func (sr *scheduler) resumeSchedule(ctx context.Context, user string, req *api.ScheduleRequest) (any, error) {
	return sr.setSchedulePaused(ctx, user, req, false)
}

// setSchedulePaused pauses or resumes a schedule for every replica. A
// resumed schedule fires at once for the latest period missed while it
// was paused, if any (the catch-up policy), on this replica.
func (sr *scheduler) setSchedulePaused(ctx context.Context, user string, req *api.ScheduleRequest, paused bool) (any, error) {
	t := sr.table()
	sc, ok := t.Schedules[req.Name]
	if !ok {
		names := make([]string, 0, len(t.Schedules))
		for n := range t.Schedules {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, errf(api.CodeNotFound, "authz: no schedule %q in the table (schedules: %v)", logging.Capped(req.Name), names)
	}
	now := sr.now()
	var st records.ScheduleState
	_, err := streams.UpdateKV(ctx, sr.schedules, streams.ScheduleKey(req.Name), func(cur []byte, exists bool) ([]byte, error) {
		st = records.ScheduleState{}
		if exists {
			var err error
			if st, err = records.DecodeScheduleState(cur); err != nil {
				return nil, err
			}
		}
		if st.Spec != sc.timing.spec {
			st.Spec, st.Since = sc.timing.spec, now.UTC()
		}
		if st.Paused && !paused {
			// Of the periods that began while paused, only the latest
			// fires: periods start whole seconds apart, so the one just
			// after a second before it is itself.
			if latest, ok := sc.timing.latest(periodFloor(st), now); ok {
				st.Since = latest.Add(-time.Second).UTC()
			}
		}
		st.Paused, st.By, st.At = paused, user, now.UTC()
		return st.Encode(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("authz: set schedule %s's pause state: %w", req.Name, err)
	}
	if !paused {
		sr.poke()
	}
	sr.log.Info("schedule state changed", "schedule", req.Name, "paused", paused, "by", user)
	info := scheduleInfo(t, req.Name, sc, st, now)
	return &info, nil
}

// readScheduleState reads schedule name's state; the zero state when it
// has none yet (no replica looked at it).
func (sr *scheduler) readScheduleState(ctx context.Context, name string) (records.ScheduleState, error) {
	e, err := sr.schedules.Get(ctx, streams.ScheduleKey(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return records.ScheduleState{}, nil
	}
	if err != nil {
		return records.ScheduleState{}, fmt.Errorf("authz: schedule %s: %w", name, err)
	}
	return records.DecodeScheduleState(e.Value())
}

// scheduleInfo describes schedule name of table t in state st at now.
func scheduleInfo(t *Table, name string, sc *Schedule, st records.ScheduleState, now time.Time) api.ScheduleInfo {
	info := api.ScheduleInfo{
		Name: name, Cron: sc.Cron, TimeZone: sc.TimeZone, User: sc.User, Label: sc.Label,
		Priority: sc.priority(t.Labels[sc.Label]), Key: sc.Key,
		Paused: st.Paused, By: st.By, At: st.At,
	}
	if !st.Last.IsZero() {
		last := st.Last.UTC()
		info.LastFired, info.LastBatch = &last, st.Batch
	}
	if !st.Paused {
		if next := sc.timing.next(now); !next.IsZero() {
			next = next.UTC()
			info.NextFire = &next
		}
	}
	return info
}
