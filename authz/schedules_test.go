package authz_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// everySecond is tableYAML with a schedule firing a noop under jobs as
// alice every second.
const everySecond = tableYAML + `
schedules:
  tick:
    cron: "@every 1s"
    user: alice
    label: jobs
    functions: [{type: noop, payload: {report: daily}}]
`

// TestParseScheduleRejects: a schedule the table cannot fire, or whose
// batch its label would refuse, is refused at load, naming the schedule,
// the field and what was expected.
func TestParseScheduleRejects(t *testing.T) {
	const labels = "labels:\n  jobs: {domain: d, users: [alice], mode: non_atomic, priority: med, functions: {noop: {}, wait: {confirm: {timeout: 1s}}}}\n"
	schedule := func(fields string) string {
		return labels + "schedules:\n  s: {" + fields + "}\n"
	}
	const ok = "user: alice, label: jobs, functions: [{type: noop}]"
	tests := []struct {
		name, yaml, want string
	}{
		{name: "bad cron", yaml: schedule(`cron: "61 * * * *", ` + ok), want: "schedules.s.cron"},
		{name: "six fields", yaml: schedule(`cron: "0 0 * * * *", ` + ok), want: "schedules.s.cron: \"0 0 * * * *\": expected a five-field cron spec"},
		{name: "no cron", yaml: schedule(ok), want: "schedules.s.cron: must be a five-field cron spec"},
		{name: "never fires", yaml: schedule(`cron: "0 0 30 2 *", ` + ok), want: "schedules.s.cron: \"0 0 30 2 *\" never fires"},
		{name: "every under a second", yaml: schedule(`cron: "@every 500ms", ` + ok), want: "schedules.s.cron: \"@every 500ms\": @every takes whole seconds, at least 1s"},
		{name: "every a fraction of seconds", yaml: schedule(`cron: "@every 1500ms", ` + ok), want: "whole seconds"},
		{name: "every without a duration", yaml: schedule(`cron: "@every soon", ` + ok), want: "schedules.s.cron: \"@every soon\": the duration of @every"},
		{name: "unknown descriptor", yaml: schedule(`cron: "@fortnightly", ` + ok), want: "schedules.s.cron"},
		{name: "time zone in the spec", yaml: schedule(`cron: "CRON_TZ=Europe/Paris 0 2 * * *", ` + ok), want: "give the time zone as time_zone"},
		{name: "unknown time zone", yaml: schedule(`cron: "0 2 * * *", time_zone: Mars/Olympus, ` + ok), want: "schedules.s.time_zone: time zone \"Mars/Olympus\": expected an IANA time zone"},
		{name: "time zone with every", yaml: schedule(`cron: "@every 1h", time_zone: Europe/Paris, ` + ok), want: "schedules.s.time_zone"},
		{name: "bad name", yaml: labels + "schedules:\n  a.b: {cron: '@daily', " + ok + "}\n", want: "schedules.a.b: a schedule's name may hold only"},
		{name: "no user", yaml: schedule(`cron: "@daily", label: jobs, functions: [{type: noop}]`), want: "schedules.s.user: must name the user"},
		{name: "anyone as the user", yaml: schedule(`cron: "@daily", user: "*", label: jobs, functions: [{type: noop}]`), want: "schedules.s.user"},
		{name: "user the label refuses", yaml: schedule(`cron: "@daily", user: bob, label: jobs, functions: [{type: noop}]`), want: "schedules.s.user: \"bob\" may not submit under label \"jobs\""},
		{name: "unknown label", yaml: schedule(`cron: "@daily", user: alice, label: nightly, functions: [{type: noop}]`), want: "schedules.s.label: unknown label \"nightly\""},
		{name: "bad priority", yaml: schedule(`cron: "@daily", priority: urgent, ` + ok), want: "schedules.s.priority"},
		{name: "no functions", yaml: schedule(`cron: "@daily", user: alice, label: jobs`), want: "schedules.s.functions: must hold at least one function"},
		{name: "function the label refuses", yaml: schedule(`cron: "@daily", user: alice, label: jobs, functions: [{type: http.post}]`), want: "schedules.s.functions[0].type: \"http.post\" is not allowed under label \"jobs\""},
		{name: "confirmation without expect", yaml: schedule(`cron: "@daily", user: alice, label: jobs, functions: [{type: wait}]`), want: "schedules.s.functions[0].expect: \"wait\" needs a confirmation"},
		{name: "payload without a JSON form", yaml: schedule(`cron: "@daily", user: alice, label: jobs, functions: [{type: noop, payload: {1: one}}]`), want: "schedules.s.functions[0].payload: must be a value with a JSON form"},
		{name: "unknown field", yaml: schedule(`cron: "@daily", every: 1s, ` + ok), want: "every"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := authz.ParseTable([]byte(tt.yaml))
			if !errors.Is(err, authz.ErrTable) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want ErrTable mentioning %q", err, tt.want)
			}
		})
	}
}

// TestParseScheduleAccepts: five-field specs, descriptors in a time zone,
// @every, and a batch with its own priority, key and payload.
func TestParseScheduleAccepts(t *testing.T) {
	table, err := authz.ParseTable([]byte(tableYAML + `
schedules:
  every-5-min: {cron: "*/5 * * * *", user: alice, label: jobs, functions: [{type: noop}]}
  nightly: {cron: "@daily", time_zone: Europe/Paris, user: bob, label: limited, priority: high, key: nightly, functions: [{type: noop, payload: {at: "02:00", n: [1, 2]}}]}
  heartbeat: {cron: "@every 90s", user: bob, label: jobs, functions: [{type: noop}, {type: flaky}]}
`))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(table.Schedules); n != 3 {
		t.Fatalf("%d schedules, want 3", n)
	}
}

// replica is an authz replica run for a test, on its own connection.
type replica struct {
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// startReplica runs an authz replica of table yaml on env.
func startReplica(t *testing.T, env *testnats.Env, yaml string) *replica {
	t.Helper()
	table, err := authz.ParseTable([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{nc: env.Conn(t, "authz"), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	svc, err := authz.New(ctx, r.nc, authz.Options{Table: table, Owner: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer close(r.done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *replica) stop(t *testing.T) {
	r.once.Do(func() { r.cancel(); testnats.Stopped(t, "authz", r.done) })
}

// kill stops the replica as a crash would: its connection is gone at
// once, whatever it was doing, and nothing more it sends arrives.
func (r *replica) kill(t *testing.T) {
	r.nc.Close()
	r.stop(t)
}

// lastFired is the owner's view of schedule name's last period fired
// (zero: none yet), asked again when no answer comes (answeredRead).
func lastFired(t *testing.T, b *bundle, name string) time.Time {
	t.Helper()
	rep := answeredRead(t, "schedules", func() (*api.SchedulesReply, error) {
		return b.client(t, "owner").Schedules(b.ctx)
	})
	for _, s := range rep.Schedules {
		if s.Name == name && s.LastFired != nil {
			return *s.LastFired
		}
	}
	return time.Time{}
}

// firedUntil waits until schedule name has fired a period at or after at.
func firedUntil(t *testing.T, b *bundle, name string, at time.Time) time.Time {
	t.Helper()
	var last time.Time
	testnats.Eventually(t, 30*time.Second, "schedule "+name+" fired "+at.String(), func() bool {
		last = lastFired(t, b, name)
		return !last.IsZero() && !last.Before(at)
	})
	return last
}

// schedulePeriods maps each period of schedule name that has a batch of
// alice's to its batch ids, as the owner lists and reads them.
func schedulePeriods(t *testing.T, b *bundle, name string) map[time.Time][]uint64 {
	t.Helper()
	owner := b.client(t, "owner")
	out := map[time.Time][]uint64{}
	seen := map[uint64]bool{}
	req := api.ListRequest{Submitter: "alice", Limit: 100}
	for {
		page := answered(t, "list", func() (*api.ListReply, error) { return owner.List(b.ctx, req) })
		for _, it := range page.Items {
			if seen[it.ID] {
				continue
			}
			seen[it.ID] = true
			rec := b.record(t, it.ID)
			n, p, ok := streams.ParseScheduleIdempotencyKey(rec.IdempotencyKey)
			if !ok || n != name {
				t.Fatalf("batch %d of alice's has idempotency key %q, not one of schedule %s's", it.ID, rec.IdempotencyKey, name)
			}
			out[p] = append(out[p], it.ID)
		}
		if page.Next == 0 {
			return out
		}
		req.Before = page.Next
	}
}

// oncePerPeriod fails unless every period from the first fired to the
// last, every second, has exactly one batch, and returns the first and the
// last.
func oncePerPeriod(t *testing.T, got map[time.Time][]uint64) (first, last time.Time) {
	t.Helper()
	for p, ids := range got {
		if first.IsZero() || p.Before(first) {
			first = p
		}
		if p.After(last) {
			last = p
		}
		if len(ids) != 1 {
			t.Errorf("period %v has batches %v, want one", p, ids)
		}
	}
	for p := first; !p.After(last); p = p.Add(time.Second) {
		if len(got[p]) == 0 {
			t.Errorf("period %v, between the first fired (%v) and the last (%v), has no batch", p, first, last)
		}
	}
	return first, last
}

// TestScheduleTwoReplicasOneBatchPerPeriod: a schedule every second with
// two authz replicas, both firing it, gives each period one batch over
// five periods and more: none doubled, none missed.
func TestScheduleTwoReplicasOneBatchPerPeriod(t *testing.T) {
	env := testnats.Start(t, []string{domain})
	b := &bundle{env: env, ctx: testnats.Context(t, time.Minute)}
	startReplica(t, env, everySecond)
	startReplica(t, env, everySecond)
	first := firedUntil(t, b, "tick", time.Time{})
	firedUntil(t, b, "tick", first.Add(5*time.Second))
	got := schedulePeriods(t, b, "tick")
	if f, l := oncePerPeriod(t, got); l.Sub(f) < 5*time.Second {
		t.Fatalf("periods %v to %v, want at least six", f, l)
	}
}

// TestScheduleSurvivesAReplicaKill: of two replicas firing a schedule
// every second, one dies abruptly mid-run; the other goes on, and every
// period from the first fired to the last still has exactly one batch.
func TestScheduleSurvivesAReplicaKill(t *testing.T) {
	env := testnats.Start(t, []string{domain})
	b := &bundle{env: env, ctx: testnats.Context(t, time.Minute)}
	doomed := startReplica(t, env, everySecond)
	startReplica(t, env, everySecond)
	first := firedUntil(t, b, "tick", time.Time{})
	killed := firedUntil(t, b, "tick", first.Add(time.Second))
	doomed.kill(t)
	firedUntil(t, b, "tick", killed.Add(3*time.Second))
	got := schedulePeriods(t, b, "tick")
	if f, l := oncePerPeriod(t, got); l.Sub(f) < 4*time.Second {
		t.Fatalf("periods %v to %v, want at least five", f, l)
	}
}

// TestScheduleOperations: the owner lists the schedules with their next
// fire time, pauses one (listed paused, without a next fire time) and
// resumes it; a name the table lacks is a 404 naming the schedules; every
// other caller gets 403 for each operation.
func TestScheduleOperations(t *testing.T) {
	b := setup(t)
	b.stop()
	b.runAuthz(t, authz.Options{Table: mustTable(t, tableYAML+`
schedules:
  nightly: {cron: "0 2 * * *", time_zone: Europe/Paris, user: alice, label: jobs, functions: [{type: noop}]}
`)})
	owner := b.client(t, "owner")
	rep := answered(t, "schedules", func() (*api.SchedulesReply, error) { return owner.Schedules(b.ctx) })
	if len(rep.Schedules) != 1 {
		t.Fatalf("listed %+v, want the one schedule", rep.Schedules)
	}
	s := rep.Schedules[0]
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "nightly" || s.Paused || s.LastFired != nil || s.NextFire == nil ||
		s.NextFire.In(paris).Hour() != 2 || s.NextFire.In(paris).Minute() != 0 || !s.NextFire.After(time.Now()) {
		t.Fatalf("listed %+v, want nightly, active, never fired, next at 02:00 Paris time", s)
	}
	paused := answered(t, "pause_schedule", func() (*api.ScheduleInfo, error) {
		return owner.PauseSchedule(b.ctx, api.ScheduleRequest{Name: "nightly"})
	})
	if !paused.Paused || paused.By != "owner" || paused.NextFire != nil {
		t.Fatalf("paused: %+v", paused)
	}
	rep = answered(t, "schedules", func() (*api.SchedulesReply, error) { return owner.Schedules(b.ctx) })
	if !rep.Schedules[0].Paused {
		t.Fatalf("listed %+v after the pause", rep.Schedules[0])
	}
	resumed := answered(t, "resume_schedule", func() (*api.ScheduleInfo, error) {
		return owner.ResumeSchedule(b.ctx, api.ScheduleRequest{Name: "nightly"})
	})
	if resumed.Paused || resumed.NextFire == nil {
		t.Fatalf("resumed: %+v", resumed)
	}
	_, err = owner.PauseSchedule(b.ctx, api.ScheduleRequest{Name: "hourly"})
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "nightly") {
		t.Fatalf("pause of an unknown schedule: %v, want 404 naming the schedules", err)
	}
	alice := b.client(t, "alice")
	for name, call := range map[string]func() error{
		"schedules": func() error { _, err := alice.Schedules(b.ctx); return err },
		"pause_schedule": func() error {
			_, err := alice.PauseSchedule(b.ctx, api.ScheduleRequest{Name: "nightly"})
			return err
		},
		"resume_schedule": func() error {
			_, err := alice.ResumeSchedule(b.ctx, api.ScheduleRequest{Name: "nightly"})
			return err
		},
	} {
		if err := call(); !errors.Is(err, client.ErrForbidden) {
			t.Errorf("alice's %s: %v, want 403", name, err)
		}
	}
	rep = answered(t, "schedules", func() (*api.SchedulesReply, error) { return owner.Schedules(b.ctx) })
	if rep.Schedules[0].Paused {
		t.Fatal("alice's pause took effect")
	}
}

// TestScheduleKeysAreTheSchedules: a caller's send may not use an
// idempotency key of the schedules' own form, so nobody takes a period's
// key before its schedule does.
func TestScheduleKeysAreTheSchedules(t *testing.T) {
	b := setup(t)
	e := b.call(t, "alice", "send", api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop()},
		IdempotencyKey: streams.ScheduleIdempotencyKey("tick", time.Now())}, nil)
	if e == nil || e.Code != "400" || !strings.Contains(e.Msg, "schedule:") {
		t.Fatalf("got %+v, want a 400 naming the reserved prefix", e)
	}
}

// TestReloadRefusesABadSchedule: a reload whose table has a schedule that
// cannot fire is refused with a 400 naming it, and the table in force
// stays.
func TestReloadRefusesABadSchedule(t *testing.T) {
	b, svc, path := authzFromFile(t, everySecond)
	bad := strings.Replace(everySecond, `"@every 1s"`, `"0 25 * * *"`, 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	e := b.call(t, "owner", "reload", struct{}{}, nil)
	if e == nil || e.Code != "400" || !strings.Contains(e.Msg, "schedules.tick.cron") {
		t.Fatalf("reload of a bad schedule: %+v, want a 400 naming schedules.tick.cron", e)
	}
	if got := svc.Table().Schedules["tick"].Cron; got != "@every 1s" {
		t.Fatalf("schedule in force %q, want the old one", got)
	}
}

func mustTable(t *testing.T, yaml string) *authz.Table {
	t.Helper()
	table, err := authz.ParseTable([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return table
}

// TestExampleSchedulesParse: the schedules authz.yaml shows, commented
// out, make a valid table once uncommented.
func TestExampleSchedulesParse(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "authz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n# schedules:\n")
	if i < 0 {
		t.Fatal("authz.yaml shows no schedules: example")
	}
	var uncommented strings.Builder
	for _, line := range strings.Split(text[i+1:], "\n") {
		if !strings.HasPrefix(line, "#") {
			break
		}
		uncommented.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ") + "\n")
	}
	table, err := authz.ParseTable([]byte(text[:i+1] + uncommented.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(table.Schedules) != 2 {
		t.Fatalf("%d schedules, want the example's 2", len(table.Schedules))
	}
}
