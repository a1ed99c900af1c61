package processor

import (
	"sync/atomic"
	"time"
)

// stepIdle is how long a step goroutine waits for the next step before it
// exits.
const stepIdle = 100 * time.Millisecond

// stepRunner runs steps on goroutines that outlive them. A step's calls go
// deep, and a new goroutine grows its stack on the way down, copying it
// each time (about 2.5% of a drained batch's CPU); one that ran a step
// before keeps its grown stack for the next. A goroutine that found no
// step for stepIdle exits, so an idle processor holds none.
type stepRunner struct {
	work chan func()
	// wait is how long a goroutine waits for a step: stepIdle.
	wait time.Duration
	// live counts the goroutines, idle those waiting for a step.
	live, idle atomic.Int32
}

func newStepRunner(wait time.Duration) *stepRunner {
	return &stepRunner{work: make(chan func()), wait: wait}
}

// run runs f on an idle step goroutine, or on a new one when none waits.
func (r *stepRunner) run(f func()) {
	select {
	case r.work <- f:
	default:
		go r.loop(f)
	}
}

func (r *stepRunner) loop(f func()) {
	r.live.Add(1)
	defer r.live.Add(-1)
	idle := time.NewTimer(r.wait)
	defer idle.Stop()
	for {
		f()
		idle.Reset(r.wait)
		r.idle.Add(1)
		select {
		case f = <-r.work:
			r.idle.Add(-1)
		case <-idle.C:
			r.idle.Add(-1)
			return
		}
	}
}
