package authz

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// Schedule is one entry of the table's schedules: section: a batch authz
// sends on its own once per period of Cron, as User, under Label. Any
// number of authz replicas send it, and each period still has one batch
// (its idempotency key names the schedule and the period); after a time
// when no replica ran, only the latest period missed is sent.
type Schedule struct {
	// Cron is when the schedule fires: a standard five-field cron spec
	// (minute hour day-of-month month day-of-week), a descriptor (@hourly,
	// @daily, @midnight, @weekly, @monthly, @yearly, @annually), or
	// "@every <duration>" of whole seconds, at least 1s, whose periods
	// start at multiples of the duration since the Unix epoch.
	Cron string `yaml:"cron" json:"cron"`
	// TimeZone is the IANA zone the cron spec is read in (e.g.
	// Europe/Paris). Default UTC, whatever each replica's local zone; not
	// allowed with @every.
	TimeZone string `yaml:"time_zone,omitempty" json:"time_zone,omitempty"`
	// User is the submitter the batches run as: a user the label allows.
	User string `yaml:"user" json:"user"`
	// Label is the label the batches are sent under.
	Label string `yaml:"label" json:"label"`
	// Priority, when set, is the batches' priority (high or med) instead of
	// the label's.
	Priority pipeline.Priority `yaml:"priority,omitempty" json:"priority,omitempty"`
	// Key, when set, serialises the batches with the label's others of the
	// same key.
	Key string `yaml:"key,omitempty" json:"key,omitempty"`
	// Functions are the batch's functions, in order.
	Functions []ScheduledCall `yaml:"functions" json:"functions"`

	timing *timing
	calls  []api.CallSpec
}

// ScheduledCall is one function of a schedule's batch.
type ScheduledCall struct {
	Type string `yaml:"type" json:"type"`
	// Payload is the function's argument: any YAML value that has a JSON
	// form (maps with string keys, lists, strings, numbers, booleans).
	Payload any `yaml:"payload,omitempty" json:"payload,omitempty"`
	// Expect is the confirmation content to wait for, for function types
	// whose rule requires a confirmation.
	Expect string `yaml:"expect,omitempty" json:"expect,omitempty"`
}

// maxScheduleName bounds a schedule's name: it is a key of the schedules
// bucket and part of every period's idempotency key.
const maxScheduleName = 64

// minEvery is the shortest @every period.
const minEvery = time.Second

// validateSchedules checks the schedules: section: each name, timing and
// user, and each batch as a send of it would be checked, so that a
// schedule in force never sends a batch its label refuses.
func (t *Table) validateSchedules(now time.Time) error {
	names := make([]string, 0, len(t.Schedules))
	for n := range t.Schedules {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sc := t.Schedules[n]
		if err := validateScheduleName(n); err != nil {
			return fmt.Errorf("%w: schedules.%s: %w", ErrTable, logging.Capped(n), err)
		}
		fail := func(field string, err error) error {
			return fmt.Errorf("%w: schedules.%s.%s: %w", ErrTable, n, field, err)
		}
		if sc == nil {
			return fmt.Errorf("%w: schedules.%s: empty", ErrTable, n)
		}
		tm, err := parseTiming(sc.Cron, sc.TimeZone)
		if err != nil {
			field := "cron"
			if errors.Is(err, errTimeZone) {
				field = "time_zone"
			}
			return fail(field, err)
		}
		if tm.next(now).IsZero() {
			return fail("cron", fmt.Errorf("%q never fires", sc.Cron))
		}
		if sc.User == "" || sc.User == Anyone {
			return fail("user", errors.New(`must name the user the batches run as (not "*")`))
		}
		if err := pipeline.ValidateDomain(sc.User); err != nil {
			return fail("user", fmt.Errorf("a user name is one subject token: %w", err))
		}
		l, ok := t.Labels[sc.Label]
		if !ok {
			return fail("label", fmt.Errorf("unknown label %q", logging.Capped(sc.Label)))
		}
		if !l.Allows(sc.User) {
			return fail("user", fmt.Errorf("%q may not submit under label %q (users: %v)", sc.User, sc.Label, l.Users))
		}
		if sc.Priority != "" {
			if err := sc.Priority.Validate(); err != nil {
				return fail("priority", err)
			}
		}
		calls := make([]api.CallSpec, len(sc.Functions))
		for i, f := range sc.Functions {
			p, err := schedulePayload(f.Payload)
			if err != nil {
				return fail(fmt.Sprintf("functions[%d].payload", i), err)
			}
			calls[i] = api.CallSpec{Type: f.Type, Payload: p, Expect: f.Expect}
		}
		if _, err := l.Build(sc.Label, sc.User, calls, sc.Key, now); err != nil {
			if ve := (*pipeline.ValidationError)(nil); errors.As(err, &ve) {
				return fail(ve.Field, errors.New(ve.Rule))
			}
			return fail("functions", err)
		}
		if err := t.allowedTypes(l.Domain, calls); err != nil {
			return fail("functions", err)
		}
		sc.timing, sc.calls = tm, calls
	}
	return nil
}

// schedulesReady validates a table built in code rather than parsed, whose
// schedules were not read yet (their timing and calls).
func (t *Table) schedulesReady() error {
	for _, sc := range t.Schedules {
		if sc == nil || sc.timing == nil {
			return t.Validate()
		}
	}
	return nil
}

// validateScheduleName checks a schedule's name: letters, digits, '-' and
// '_', at most maxScheduleName bytes.
func validateScheduleName(n string) error {
	if n == "" || len(n) > maxScheduleName {
		return fmt.Errorf("a schedule's name must be 1 to %d bytes (got %d)", maxScheduleName, len(n))
	}
	for _, r := range n {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return fmt.Errorf("a schedule's name may hold only letters, digits, '-' and '_' (got %q)", n)
		}
	}
	return nil
}

// schedulePayload turns a payload read from YAML into a function's
// payload, through its JSON form, as a send's payload is read.
func schedulePayload(v any) (pipeline.Payload, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("must be a value with a JSON form (maps with string keys, lists, strings, numbers, booleans): %w", err)
	}
	var p pipeline.Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return p, nil
}

// priority is the priority of the schedule's batches under label l.
func (sc *Schedule) priority(l *Label) pipeline.Priority {
	if sc.Priority != "" {
		return sc.Priority
	}
	return l.Priority
}

// errTimeZone is matched by a timing whose time zone is wrong.
var errTimeZone = errors.New("time zone")

// timing is a schedule's periods: each starts at a time Cron names.
type timing struct {
	// every, when set, is an @every period: periods start at its multiples
	// since the Unix epoch, so that every replica agrees on them.
	every time.Duration
	cron  cron.Schedule
	// spec identifies the timing (spec and zone) in the schedule's state:
	// a changed timing starts afresh.
	spec string
}

// cronParser reads standard five-field specs and descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseTiming reads a schedule's cron spec in time zone tz ("" for UTC).
func parseTiming(spec, tz string) (*timing, error) {
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, errors.New(`must be a five-field cron spec ("30 2 * * *"), a descriptor ("@daily") or "@every <duration>"`)
	}
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, fmt.Errorf("%q: give the time zone as time_zone, not in the spec", logging.Capped(spec))
	}
	if d, ok := strings.CutPrefix(s, "@every "); ok {
		if tz != "" {
			return nil, fmt.Errorf("%w %q: does not apply to @every, whose periods are multiples of its duration since the Unix epoch; use a cron spec such as \"0 2 * * *\" to fire at a time of day", errTimeZone, logging.Capped(tz))
		}
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("%q: the duration of @every: %w", logging.Capped(spec), err)
		}
		if every < minEvery || every%time.Second != 0 {
			return nil, fmt.Errorf("%q: @every takes whole seconds, at least %v (got %v)", logging.Capped(spec), minEvery, every)
		}
		return &timing{every: every, spec: "@every " + every.String()}, nil
	}
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil || tz == "Local" {
			return nil, fmt.Errorf("%w %q: expected an IANA time zone such as Europe/Paris or UTC", errTimeZone, logging.Capped(tz))
		}
	}
	sched, err := cronParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q: expected a five-field cron spec (minute hour day-of-month month day-of-week, e.g. \"30 2 * * *\"), a descriptor (@hourly, @daily, @weekly, @monthly, @yearly) or \"@every <duration>\": %w", logging.Capped(spec), err)
	}
	ss, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%q: expected a five-field cron spec, a descriptor or \"@every <duration>\"", logging.Capped(spec))
	}
	ss.Location = loc
	return &timing{cron: sched, spec: s + " " + loc.String()}, nil
}

// next is the start of the first period after t; zero if there is none.
func (tm *timing) next(t time.Time) time.Time {
	if tm.every > 0 {
		return tm.floor(t).Add(tm.every)
	}
	return tm.cron.Next(t)
}

// floor is the start of the @every period holding t.
func (tm *timing) floor(t time.Time) time.Time {
	sec := int64(tm.every / time.Second)
	u := t.Unix()
	u -= ((u % sec) + sec) % sec
	return time.Unix(u, 0).UTC()
}

// latestWindowMax is the widest window latest searches before it searches
// back to its floor.
const latestWindowMax = 50 * 365 * 24 * time.Hour

// latest is the start of the latest period that began after floor and by
// now; false if none did.
func (tm *timing) latest(floor, now time.Time) (time.Time, bool) {
	if tm.every > 0 {
		p := tm.floor(now)
		return p, p.After(floor)
	}
	// Back from now in growing windows: a dense spec finds its latest
	// period in the first, after a few steps of Next; a sparse one steps
	// through the wide windows in a few.
	for w := 2 * time.Minute; ; w *= 8 {
		start, last := now.Add(-w), false
		if !start.After(floor) || w > latestWindowMax {
			start, last = floor, true
		}
		var found time.Time
		for p := tm.cron.Next(start); !p.IsZero() && !p.After(now); p = tm.cron.Next(p) {
			found = p
		}
		if !found.IsZero() {
			return found, true
		}
		if last {
			return time.Time{}, false
		}
	}
}
