package authz

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestTimingPeriods: a timing's latest period after a floor and by now, and
// its next period: @every periods at multiples of the duration since the
// epoch, cron periods in the schedule's zone, a sparse spec found however
// far back, and none when nothing began after the floor.
func TestTimingPeriods(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name, cron, tz string
		floor, now     string
		latest, next   string // "" latest: none
	}{
		{name: "every 10s", cron: "@every 10s", floor: "2026-01-01T00:00:00Z", now: "2026-01-01T00:00:25Z",
			latest: "2026-01-01T00:00:20Z", next: "2026-01-01T00:00:30Z"},
		{name: "every 10s, on a boundary", cron: "@every 10s", floor: "2026-01-01T00:00:00Z", now: "2026-01-01T00:00:30Z",
			latest: "2026-01-01T00:00:30Z", next: "2026-01-01T00:00:40Z"},
		{name: "every 10s, nothing after the floor", cron: "@every 10s", floor: "2026-01-01T00:00:20Z", now: "2026-01-01T00:00:29Z",
			next: "2026-01-01T00:00:30Z"},
		{name: "daily at 02:30 in Paris", cron: "30 2 * * *", tz: "Europe/Paris", floor: "2026-01-01T00:00:00Z", now: "2026-01-03T12:00:00Z",
			latest: "2026-01-03T01:30:00Z", next: "2026-01-04T01:30:00Z"},
		{name: "daily at 02:30 in UTC by default", cron: "30 2 * * *", floor: "2026-01-01T00:00:00Z", now: "2026-01-03T12:00:00Z",
			latest: "2026-01-03T02:30:00Z", next: "2026-01-04T02:30:00Z"},
		{name: "every minute, long downtime", cron: "* * * * *", floor: "2020-01-01T00:00:00Z", now: "2026-01-03T12:00:30Z",
			latest: "2026-01-03T12:00:00Z", next: "2026-01-03T12:01:00Z"},
		{name: "leap day, years back", cron: "0 0 29 2 *", floor: "2020-01-01T00:00:00Z", now: "2026-06-01T00:00:00Z",
			latest: "2024-02-29T00:00:00Z", next: "2028-02-29T00:00:00Z"},
		{name: "hourly, nothing after the floor", cron: "@hourly", floor: "2026-01-01T10:00:00Z", now: "2026-01-01T10:59:59Z",
			next: "2026-01-01T11:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm, err := parseTiming(tt.cron, tt.tz)
			if err != nil {
				t.Fatal(err)
			}
			p, ok := tm.latest(at(tt.floor), at(tt.now))
			switch {
			case tt.latest == "" && ok:
				t.Fatalf("latest %v, want none", p)
			case tt.latest != "" && (!ok || !p.Equal(at(tt.latest))):
				t.Fatalf("latest %v (%v), want %s", p, ok, tt.latest)
			}
			if n := tm.next(at(tt.now)); !n.Equal(at(tt.next)) {
				t.Fatalf("next %v, want %s", n, tt.next)
			}
		})
	}
}

const scheduleTable = `
labels:
  jobs: {domain: pay, users: [alice], mode: non_atomic, priority: med, functions: {noop: {}}}
schedules:
  tick:
    cron: "@every 1s"
    user: alice
    label: jobs
    functions: [{type: noop, payload: {n: 1}}]
`

// clock is a test clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// scheduleReplicas starts n authz replicas of scheduleTable on one server,
// all reading c.
func scheduleReplicas(t *testing.T, n int, c *clock) ([]*Service, context.Context) {
	t.Helper()
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 60*time.Second)
	out := make([]*Service, n)
	for i := range out {
		table, err := ParseTable([]byte(scheduleTable))
		if err != nil {
			t.Fatal(err)
		}
		if out[i], err = New(ctx, env.Conn(t, "authz"), Options{Table: table, Now: c.Now}); err != nil {
			t.Fatal(err)
		}
	}
	return out, ctx
}

// periodBatches maps each period of schedule name that has a batch of
// alice's to its batches' ids (more than one: the period doubled), and
// fails on a batch of alice's that is no period's.
func periodBatches(ctx context.Context, t *testing.T, s *Service, name string) map[time.Time][]uint64 {
	t.Helper()
	out := map[time.Time][]uint64{}
	seen := map[uint64]bool{}
	for _, id := range listAll(ctx, t, s, "alice", 100) {
		if seen[id] {
			continue
		}
		seen[id] = true
		rec, err := s.store.record(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		n, p, ok := streams.ParseScheduleIdempotencyKey(rec.IdempotencyKey)
		if !ok || n != name {
			t.Fatalf("batch %d has idempotency key %q, not one of schedule %s's periods", id, rec.IdempotencyKey, name)
		}
		out[p] = append(out[p], id)
	}
	return out
}

// wantPeriods fails unless exactly the periods want have a batch, one each.
func wantPeriods(ctx context.Context, t *testing.T, s *Service, want ...time.Time) {
	t.Helper()
	got := periodBatches(ctx, t, s, "tick")
	for p, ids := range got {
		if len(ids) != 1 {
			t.Errorf("period %v has batches %v, want one", p, ids)
		}
	}
	for _, p := range want {
		if len(got[p]) == 0 {
			t.Errorf("period %v has no batch", p)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("periods with a batch: %v; want %v", got, want)
	}
}

func scheduleState(ctx context.Context, t *testing.T, s *Service) records.ScheduleState {
	t.Helper()
	st, err := s.sched.readScheduleState(ctx, "tick")
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestScheduleOneBatchPerPeriodAcrossReplicas: three replicas firing the
// same schedule at once, period after period, send one batch per period,
// and the schedule's state names the last period fired and its batch. A
// new schedule does not fire for the period it was first seen in.
func TestScheduleOneBatchPerPeriodAcrossReplicas(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 300_000_000).UTC()}
	replicas, ctx := scheduleReplicas(t, 3, c)
	start := time.Unix(1_800_000_000, 0).UTC()
	fireAll := func() {
		var wg sync.WaitGroup
		for _, s := range replicas {
			wg.Go(func() { s.sched.fireDue(ctx) })
		}
		wg.Wait()
	}
	fireAll()
	wantPeriods(ctx, t, replicas[0])
	var want []time.Time
	for i := 1; i <= 5; i++ {
		c.add(time.Second)
		fireAll()
		want = append(want, start.Add(time.Duration(i)*time.Second))
		wantPeriods(ctx, t, replicas[0], want...)
	}
	st := scheduleState(ctx, t, replicas[1])
	last := want[len(want)-1]
	if !st.Last.Equal(last) || st.Batch == 0 {
		t.Fatalf("state %+v, want last period %v with its batch", st, last)
	}
	if k, ok, err := replicas[2].store.idempotent(ctx, "alice", streams.ScheduleIdempotencyKey("tick", last)); err != nil || !ok || k.id != st.Batch {
		t.Fatalf("period %v's batch %d (%v, %v), state says %d", last, k.id, ok, err, st.Batch)
	}
}

// fireAllDue has s fire until nothing more is due, as its loop does.
func fireAllDue(ctx context.Context, t *testing.T, s *Service, c *clock) {
	t.Helper()
	for range 100 {
		if s.sched.fireDue(ctx).After(c.Now()) {
			return
		}
	}
	t.Fatal("still due after 100 rounds")
}

// TestScheduleCatchUpFiresTheLatestOnly: after a time when no replica ran,
// longer than the catch-up grace, a replica fires the latest period it
// missed, once, and skips the older ones.
func TestScheduleCatchUpFiresTheLatestOnly(t *testing.T) {
	c, replicas, ctx, start := twoPeriodsFired(t, 2)
	// Nothing runs for longer than the grace; then another replica starts.
	gap := catchUpGrace + 5*time.Second
	c.add(gap)
	fireAllDue(ctx, t, replicas[1], c)
	latest := start.Add(time.Second + gap)
	wantPeriods(ctx, t, replicas[0], start.Add(time.Second), latest)
	if st := scheduleState(ctx, t, replicas[0]); !st.Last.Equal(latest) {
		t.Fatalf("last fired %v, want %v", st.Last, latest)
	}
}

// TestScheduleLateReplicaFiresEveryPeriod: a replica that looks a few
// periods late (slow, or taking over from one that died), within the
// catch-up grace, fires each period it missed, in order, once.
func TestScheduleLateReplicaFiresEveryPeriod(t *testing.T) {
	c, replicas, ctx, start := twoPeriodsFired(t, 1)
	s := replicas[0]
	c.add(3 * time.Second)
	fireAllDue(ctx, t, s, c)
	want := []time.Time{start.Add(time.Second), start.Add(2 * time.Second), start.Add(3 * time.Second), start.Add(4 * time.Second)}
	wantPeriods(ctx, t, s, want...)
	// In order: each period's batch after the one before.
	got := periodBatches(ctx, t, s, "tick")
	for i := 1; i < len(want); i++ {
		if got[want[i]][0] <= got[want[i-1]][0] {
			t.Fatalf("period %v's batch %d is not after period %v's %d", want[i], got[want[i]][0], want[i-1], got[want[i-1]][0])
		}
	}
}

// TestScheduleCrashBetweenSendAndMark: a replica that sent a period's batch
// and died before marking the period fired leaves it to be sent again by
// the next replica, which gets the same batch, and marks it.
func TestScheduleCrashBetweenSendAndMark(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 300_000_000).UTC()}
	replicas, ctx := scheduleReplicas(t, 2, c)
	start := time.Unix(1_800_000_000, 0).UTC()
	replicas[0].sched.fireDue(ctx) // the schedule's state begins
	c.add(time.Second)
	p := start.Add(time.Second)
	tb := replicas[0].Table()
	// The first replica's send, and then the crash.
	id, err := replicas[0].sched.sendPeriod(ctx, tb, "tick", tb.Schedules["tick"], p)
	if err != nil {
		t.Fatal(err)
	}
	if st := scheduleState(ctx, t, replicas[1]); !st.Last.IsZero() {
		t.Fatalf("last fired %v before any mark", st.Last)
	}
	replicas[1].sched.fireDue(ctx)
	wantPeriods(ctx, t, replicas[1], p)
	if st := scheduleState(ctx, t, replicas[1]); !st.Last.Equal(p) || st.Batch != id {
		t.Fatalf("state %+v, want period %v fired with batch %d", st, p, id)
	}
}

// TestSchedulePauseAndResume: a paused schedule fires nothing on any
// replica; resumed, it fires the latest period that began while it was
// paused, once, and skips the older ones; the pause state is every
// replica's.
func TestSchedulePauseAndResume(t *testing.T) {
	c, replicas, ctx, start := twoPeriodsFired(t, 2)
	if _, err := replicas[1].sched.pauseSchedule(ctx, "owner", &api.ScheduleRequest{Name: "tick"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		c.add(time.Second)
		replicas[0].sched.fireDue(ctx)
		replicas[1].sched.fireDue(ctx)
	}
	wantPeriods(ctx, t, replicas[0], start.Add(time.Second))
	rep, err := replicas[0].sched.listSchedules(ctx, "owner", nil)
	if err != nil {
		t.Fatal(err)
	}
	info := rep.(*api.SchedulesReply).Schedules[0]
	if !info.Paused || info.By != "owner" || info.NextFire != nil || info.LastFired == nil || !info.LastFired.Equal(start.Add(time.Second)) {
		t.Fatalf("listed %+v; want paused by owner, last fired %v, no next fire", info, start.Add(time.Second))
	}
	if _, err := replicas[0].sched.resumeSchedule(ctx, "owner", &api.ScheduleRequest{Name: "tick"}); err != nil {
		t.Fatal(err)
	}
	replicas[1].sched.fireDue(ctx)
	replicas[0].sched.fireDue(ctx)
	wantPeriods(ctx, t, replicas[0], start.Add(time.Second), start.Add(4*time.Second))
	c.add(time.Second)
	replicas[1].sched.fireDue(ctx)
	wantPeriods(ctx, t, replicas[0], start.Add(time.Second), start.Add(4*time.Second), start.Add(5*time.Second))
}

// TestScheduleTimingChangeStartsAfresh: a schedule whose timing changed
// (a reload) fires only the periods of its new timing that begin after
// the change, not the latest one before it, as a new schedule would.
func TestScheduleTimingChangeStartsAfresh(t *testing.T) {
	c, replicas, ctx, start := twoPeriodsFired(t, 1)
	s := replicas[0]
	// Nothing runs past start+10s; then the schedule every 10s is loaded.
	c.add(11 * time.Second)
	changed, err := ParseTable([]byte(strings.Replace(scheduleTable, "@every 1s", "@every 10s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	s.table.Store(changed)
	s.sched.fireDue(ctx)
	wantPeriods(ctx, t, s, start.Add(time.Second))
	c.add(8 * time.Second) // start+20.3s
	s.sched.fireDue(ctx)
	wantPeriods(ctx, t, s, start.Add(time.Second), start.Add(20*time.Second))
}

// twoPeriodsFired starts n replicas on a test clock just past a period's
// start; the first replica fires the schedule's first period (its state
// begins) and, a second later, the next. It returns the clock, the
// replicas, their context and the first period's start.
func twoPeriodsFired(t *testing.T, n int) (*clock, []*Service, context.Context, time.Time) {
	t.Helper()
	c := &clock{now: time.Unix(1_800_000_000, 300_000_000).UTC()}
	replicas, ctx := scheduleReplicas(t, n, c)
	start := time.Unix(1_800_000_000, 0).UTC()
	replicas[0].sched.fireDue(ctx)
	c.add(time.Second)
	replicas[0].sched.fireDue(ctx)
	wantPeriods(ctx, t, replicas[0], start.Add(time.Second))
	return c, replicas, ctx, start
}
