package ticker

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/robfig/cron/v3"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/processor"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// bundle is a real server from nats.conf with connections as the ticker
// user (which publishes) and the admin user (which watches tick.>).
type bundle struct {
	env    *testnats.Env
	ticker *nats.Conn
	admin  *nats.Conn
}

func setup(t *testing.T) *bundle {
	t.Helper()
	env := testnats.Start(t, nil) // ticks are core NATS: nothing to provision
	return &bundle{env: env, ticker: env.Conn(t, "ticker"), admin: env.Conn(t, "admin")}
}

// watch subscribes as admin to every tick and returns the deliveries. The
// subscription is known to the server when watch returns.
func (b *bundle) watch(t *testing.T) <-chan *nats.Msg {
	t.Helper()
	ch := make(chan *nats.Msg, 4096)
	sub, err := b.admin.ChanSubscribe("tick.>", ch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.admin.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

// start runs tk in the background and returns a stop function that cancels
// it and returns what Run returned.
func start(t *testing.T, tk *Ticker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tk.Run(ctx) }()
	t.Cleanup(cancel)
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5s of its context ending")
			return nil
		}
	}
}

// countUntil reads ticks from ch until every domain has at least n, each
// asking the default steps, and fails the test if that takes longer than 5s.
func countUntil(t *testing.T, ch <-chan *nats.Msg, domains []string, n int) map[string]int {
	t.Helper()
	got := map[string]int{}
	done := func() bool {
		for _, d := range domains {
			if got[d] < n {
				return false
			}
		}
		return true
	}
	deadline := time.After(5 * time.Second)
	for !done() {
		select {
		case m := <-ch:
			got[strings.TrimPrefix(m.Subject, "tick.")]++
			if want := strconv.Itoa(processor.DefaultMaxSteps); string(m.Data) != want {
				t.Errorf("tick to %s has body %q, want %q (the default steps)", m.Subject, m.Data, want)
			}
		case <-deadline:
			t.Fatalf("after 5s got ticks %v, want ≥ %d for each of %v", got, n, domains)
		}
	}
	return got
}

func TestEveryTicksEveryDomainRepeatedly(t *testing.T) {
	b := setup(t)
	ticks := b.watch(t)
	domains := []string{"pay", "refund", "audit"}
	tk, err := New(b.ticker, Options{Domains: domains, Every: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, tk)
	countUntil(t, ticks, domains, 3)
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}

// every20ms is a cron.Schedule that fires on a 20ms grid, so the test
// exercises the Schedule path without waiting for a real cron second.
type every20ms struct{}

func (every20ms) Next(t time.Time) time.Time {
	return t.Truncate(20 * time.Millisecond).Add(20 * time.Millisecond)
}

var _ cron.Schedule = every20ms{}

func TestScheduleTicksAtEachFire(t *testing.T) {
	b := setup(t)
	ticks := b.watch(t)
	domains := []string{"pay", "refund"}
	tk, err := New(b.ticker, Options{Domains: domains, Schedule: every20ms{}})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, tk)
	countUntil(t, ticks, domains, 3)
	if err := stop(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}

// A real cron spec is accepted as it comes from config.Tick.CronSchedule.
func TestScheduleAcceptsCronSpec(t *testing.T) {
	b := setup(t)
	sched, err := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow).Parse("*/5 * * * * *")
	if err != nil {
		t.Fatal(err)
	}
	tk, err := New(b.ticker, Options{Domains: []string{"pay"}, Schedule: sched})
	if err != nil {
		t.Fatal(err)
	}
	if err := start(t, tk)(); err != nil {
		t.Fatalf("Run returned %v after cancel, want nil", err)
	}
}

type never struct{}

func (never) Next(time.Time) time.Time { return time.Time{} }

func TestScheduleThatNeverFiresIsAnError(t *testing.T) {
	b := setup(t)
	tk, err := New(b.ticker, Options{Domains: []string{"pay"}, Schedule: never{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tk.Run(testnats.Context(t, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "never fires") {
		t.Fatalf("Run = %v, want an error saying the schedule never fires", err)
	}
}

// drainUntilMarker reads ticks until the marker tick arrives. The marker is
// published on the same connection after the ticks under test, so once it
// is here every earlier tick is here too: no sleeping to wait for stragglers.
func drainUntilMarker(t *testing.T, nc *nats.Conn, ch <-chan *nats.Msg) []*nats.Msg {
	t.Helper()
	const marker = "marker"
	if err := nc.Publish(streams.TickSubject(marker), nil); err != nil {
		t.Fatal(err)
	}
	var got []*nats.Msg
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m := <-ch:
			if m.Subject == streams.TickSubject(marker) {
				return got
			}
			got = append(got, m)
		case <-deadline:
			t.Fatalf("marker tick not received within 5s; got %d ticks before it", len(got))
		}
	}
}

func TestOncePublishesExactlyOneTickPerDomain(t *testing.T) {
	b := setup(t)
	ticks := b.watch(t)
	domains := []string{"pay", "refund", "audit"}
	tk, err := New(b.ticker, Options{Domains: domains, Once: true})
	if err != nil {
		t.Fatal(err)
	}
	// No deadline on ctx: Run bounds its flush with DefaultFlushTimeout.
	if err := tk.Run(context.Background()); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	got := map[string]int{}
	for _, m := range drainUntilMarker(t, b.ticker, ticks) {
		got[m.Subject]++
	}
	if len(got) != len(domains) {
		t.Errorf("ticks went to %v, want exactly %v", got, domains)
	}
	for _, d := range domains {
		if n := got[streams.TickSubject(d)]; n != 1 {
			t.Errorf("%d ticks to %s, want 1", n, streams.TickSubject(d))
		}
	}
}

func TestStepsBody(t *testing.T) {
	// A Ticker's default asks as many steps as a processor takes in one
	// tick; TickOnce and Request send what they are given, 0 as 1 (an
	// empty body, as `nats pub tick.<domain> ""`).
	maxSteps := strconv.Itoa(processor.DefaultMaxSteps)
	tests := []struct {
		name         string
		steps        int
		body         string // what a Ticker sends
		onceBody     string // what TickOnce sends
		want, wantOn int
	}{
		{name: "default", steps: 0, body: maxSteps, want: processor.DefaultMaxSteps, onceBody: "", wantOn: 1},
		{name: "one", steps: 1, body: "", want: 1, onceBody: "", wantOn: 1},
		{name: "several", steps: 7, body: "7", want: 7, onceBody: "7", wantOn: 7},
	}
	b := setup(t)
	ticks := b.watch(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkBody := func(how string, m *nats.Msg, body string, want int) {
				t.Helper()
				if string(m.Data) != body {
					t.Errorf("%s: body %q, want %q", how, m.Data, body)
				}
				if n, err := processor.ParseTick(m.Data); err != nil || n != want {
					t.Errorf("%s: processor.ParseTick(%q) = %d, %v; want %d", how, m.Data, n, err, want)
				}
			}
			check := func(how string, m *nats.Msg) { t.Helper(); checkBody(how, m, tt.body, tt.want) }

			tk, err := New(b.ticker, Options{Domains: []string{"pay"}, Once: true, Steps: tt.steps})
			if err != nil {
				t.Fatal(err)
			}
			if err := tk.Run(testnats.Context(t, 5*time.Second)); err != nil {
				t.Fatal(err)
			}
			if err := TickOnce(testnats.Context(t, 5*time.Second), b.ticker, "pay", tt.steps); err != nil {
				t.Fatal(err)
			}
			got := drainUntilMarker(t, b.ticker, ticks)
			if len(got) != 2 {
				t.Fatalf("got %d ticks, want 2 (Run with Once, then TickOnce)", len(got))
			}
			check("Run", got[0])
			checkBody("TickOnce", got[1], tt.onceBody, tt.wantOn)

			// The interval path sends the same body.
			every, err := New(b.ticker, Options{Domains: []string{"pay"}, Every: 5 * time.Millisecond, Steps: tt.steps})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, every)
			select {
			case m := <-ticks:
				check("Every", m)
			case <-time.After(5 * time.Second):
				t.Fatal("no tick from Every within 5s")
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			drainUntilMarker(t, b.ticker, ticks) // the ticks Every sent after the first
		})
	}
}

// The ticker user of nats.conf may tick any domain, and a user nats.conf
// does not allow to tick is told so by TickOnce rather than succeeding
// silently.
func TestPermissions(t *testing.T) {
	b := setup(t)
	ticks := b.watch(t)
	if err := TickOnce(testnats.Context(t, 5*time.Second), b.ticker, "pay", 0); err != nil {
		t.Fatalf("TickOnce as ticker = %v, want nil", err)
	}
	if got := drainUntilMarker(t, b.ticker, ticks); len(got) != 1 || got[0].Subject != "tick.pay" {
		t.Fatalf("ticks as ticker: %v, want one to tick.pay", got)
	}

	// Every role of nats.conf may tick; a user without the right is refused.
	mute := testnats.Start(t, nil, testnats.WithUser("mute", "nothing.>"))
	muteConn := mute.Conn(t, "mute", nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
	err := TickOnce(testnats.Context(t, 5*time.Second), muteConn, "pay", 0)
	if !errors.Is(err, nats.ErrPermissionViolation) {
		t.Fatalf("TickOnce as a user without the right = %v, want a permissions violation", err)
	}
	if !strings.Contains(err.Error(), "denied the tick to tick.pay") {
		t.Errorf("error %q does not say which tick was denied", err)
	}
}
