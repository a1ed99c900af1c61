package processor

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/tickflow/tickflow/api"
)

// Pace says what makes a processor take steps.
type Pace string

// The paces.
const (
	// PaceReady: while Run runs, the processor ticks itself back to back
	// as long as its queues hold ready tokens, each tick taking up to
	// Options.Concurrency steps at once, and waits on the server
	// (WaitWork) when a tick found nothing; ticks from outside still run
	// steps too. Every replica does so, so ready work is taken by all of
	// them at once. The default.
	PaceReady Pace = "ready"
	// PaceTick: only ticks make the processor take steps, however much
	// work is ready: the pace of an outside clock (a cron or interval
	// ticker).
	PaceTick Pace = "tick"
)

// ParsePace reads a pace by name: "ready" or "tick" (empty: ready).
func ParsePace(s string) (Pace, error) {
	switch Pace(s) {
	case "", PaceReady:
		return PaceReady, nil
	case PaceTick:
		return PaceTick, nil
	}
	return "", fmt.Errorf("%w: %q (expected %q or %q)", ErrPace, s, PaceReady, PaceTick)
}

// Waits of the ready pace.
const (
	// DefaultIdleWait is the default of Options.IdleWait.
	DefaultIdleWait = time.Second
	// pausedPoll is how often a paused domain's replica reads the pause
	// state again in the ready pace.
	pausedPoll = 500 * time.Millisecond
	// errorWaitMin and errorWaitMax bound the growing wait after a tick
	// that failed (the server unreachable, a consumer deleted).
	errorWaitMin, errorWaitMax = 50 * time.Millisecond, 5 * time.Second
)

// pacer runs the ready pace: it calls tick (Processor.Tick) back to back,
// and waits between ticks as their reports say.
type pacer struct {
	// tick is Processor.tick: a tick's report, and whether it ran its
	// queues dry.
	tick func(ctx context.Context, steps int) (api.TickReport, bool)
	// waitWork is Processor.WaitWork.
	waitWork func(ctx context.Context, d time.Duration) error
	// untilNext is how long until the throttle's next second.
	untilNext func() time.Duration
	// sleep waits d or until ctx is done.
	sleep    func(ctx context.Context, d time.Duration)
	steps    int           // Options.Concurrency
	idleWait time.Duration // Options.IdleWait
	log      *slog.Logger
}

// run runs the ready pace until ctx is done: ticks back to back while
// they find work, a wait on the server when one found none or ran the
// queues dry (so a replica at a moderate rate does not follow each busy
// tick with an empty one), a look at the
// pause state every pausedPoll while the domain is paused, a wait for the
// next window when the throttle's budget is spent, and a growing wait after
// a failed tick. Each tick is the same Tick a tick from outside runs, so
// priorities, retries, expiry, confirmations, per-key order, sender leases
// and the pause mean what they mean there; a tick asks for Concurrency
// steps, so a pause stops the replica after at most one round of steps.
func (pc *pacer) run(ctx context.Context) {
	errWait := time.Duration(0)
	paused := false
	for ctx.Err() == nil {
		rep, dry := pc.tick(ctx, pc.steps)
		if rep.Status != api.TickError {
			errWait = 0
		}
		if now := rep.Status == api.TickPaused; now != paused {
			paused = now
			if paused {
				pc.log.Debug("domain paused; the ready pace waits")
			} else {
				pc.log.Debug("domain resumed; the ready pace goes on")
			}
		}
		switch {
		case rep.Status == api.TickOK && !dry:
		case rep.Status == api.TickOK, rep.Status == api.TickNoMessages:
			// Nothing was ready when the tick last looked: wait on the
			// server, which answers at once if a token became ready
			// since.
			if err := pc.waitWork(ctx, pc.idleWait); err != nil && ctx.Err() == nil {
				pc.log.Warn("wait for work failed; looking again later", "err", err)
				pc.sleep(ctx, pc.idleWait)
			}
		case rep.Status == api.TickPaused:
			pc.sleep(ctx, pausedPoll)
		case rep.Status == api.TickThrottled:
			pc.sleep(ctx, pc.untilNext())
		default:
			errWait = min(max(2*errWait, errorWaitMin), errorWaitMax)
			pc.log.Warn("a tick of the ready pace failed; trying again", "err", rep.Error, "in", errWait.String())
			pc.sleep(ctx, errWait)
		}
	}
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
