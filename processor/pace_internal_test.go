package processor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
)

// TestPacerWaits runs the ready pace over a scripted series of tick
// reports and checks what it waits after each.
func TestPacerWaits(t *testing.T) {
	const idle = 3 * time.Second
	type tick struct {
		status api.TickStatus
		dry    bool
	}
	script := []tick{
		{status: api.TickError}, {status: api.TickError}, {status: api.TickError}, // a growing wait
		{status: api.TickOK},                               // no wait, and the error wait starts over
		{status: api.TickError},                            // from its minimum again
		{status: api.TickNoMessages},                       // a wait on the server
		{status: api.TickNoMessages},                       // whose failure sleeps IdleWait
		{status: api.TickOK, dry: true},                    // steps taken, the queues run dry: a wait on the server
		{status: api.TickPaused}, {status: api.TickPaused}, // the pause polled
		{status: api.TickThrottled}, // the throttle's next window
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var (
		ticks  int
		sleeps []time.Duration
		waits  []time.Duration
	)
	pc := &pacer{
		tick: func(_ context.Context, steps int) (api.TickReport, bool) {
			if steps != 7 {
				t.Errorf("a tick asked for %d steps, want 7 (Options.Concurrency)", steps)
			}
			st := script[ticks]
			ticks++
			if ticks == len(script) {
				cancel()
			}
			rep := api.TickReport{Status: st.status}
			if st.status == api.TickError {
				rep.Error = "unreachable"
			}
			return rep, st.dry
		},
		waitWork: func(_ context.Context, d time.Duration) error {
			waits = append(waits, d)
			if len(waits) == 2 {
				return errors.New("no connection")
			}
			return nil
		},
		untilNext: func() time.Duration { return 123 * time.Millisecond },
		sleep:     func(_ context.Context, d time.Duration) { sleeps = append(sleeps, d) },
		steps:     7,
		idleWait:  idle,
		log:       slog.New(slog.DiscardHandler),
	}
	pc.run(ctx)
	if ticks != len(script) {
		t.Fatalf("the pace ticked %d times, want %d", ticks, len(script))
	}
	wantSleeps := []time.Duration{
		errorWaitMin, 2 * errorWaitMin, 4 * errorWaitMin,
		errorWaitMin,
		idle,
		pausedPoll, pausedPoll,
		123 * time.Millisecond,
	}
	if !slices.Equal(sleeps, wantSleeps) {
		t.Fatalf("the pace slept %v, want %v", sleeps, wantSleeps)
	}
	if want := []time.Duration{idle, idle, idle}; !slices.Equal(waits, want) {
		t.Fatalf("the pace waited for work %v, want %v", waits, want)
	}
}

// TestPacerErrorWaitCapped: the wait after failed ticks stops growing at
// errorWaitMax.
func TestPacerErrorWaitCapped(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var sleeps []time.Duration
	pc := &pacer{
		tick: func(context.Context, int) (api.TickReport, bool) {
			return api.TickReport{Status: api.TickError, Error: "unreachable"}, false
		},
		sleep: func(_ context.Context, d time.Duration) {
			sleeps = append(sleeps, d)
			if len(sleeps) == 12 {
				cancel()
			}
		},
		steps: 1,
		log:   slog.New(slog.DiscardHandler),
	}
	pc.run(ctx)
	if last := sleeps[len(sleeps)-1]; last != errorWaitMax {
		t.Fatalf("the wait after 12 failed ticks is %s, want the cap %s (waits %v)", last, errorWaitMax, sleeps)
	}
	for i := 1; i < len(sleeps); i++ {
		if sleeps[i] < sleeps[i-1] {
			t.Fatalf("the wait shrank while ticks kept failing: %v", sleeps)
		}
	}
}
