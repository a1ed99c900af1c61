package processor

import (
	"runtime"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/testnats"
)

// TestStepRunnerReusesThenExits: steps at once run on goroutines of their
// own; a step that finds one waiting runs on it rather than on a new one;
// a goroutine that waits its time for a step exits.
func TestStepRunnerReusesThenExits(t *testing.T) {
	r := newStepRunner(time.Hour) // none exits while the test looks
	defer testnats.Eventually(t, 5*time.Second, "the goroutines end", func() bool {
		if r.live.Load() > 0 {
			r.run(runtime.Goexit) // ends the goroutine that takes it
		}
		return r.live.Load() == 0
	})
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	for range 3 {
		r.run(func() {
			started <- struct{}{}
			<-release
		})
	}
	for range 3 {
		<-started
	}
	if n := r.live.Load(); n != 3 {
		t.Fatalf("%d goroutines for 3 steps at once, want 3", n)
	}
	close(release)
	testnats.Eventually(t, 5*time.Second, "the three goroutines wait for a step", func() bool { return r.idle.Load() == 3 })
	// A goroutine counted idle may not be in its select yet: a step sent
	// in that instant starts one more, so the check is tried again.
	testnats.Eventually(t, 5*time.Second, "a step runs on a waiting goroutine", func() bool {
		before := r.live.Load()
		done := make(chan struct{})
		r.run(func() { close(done) })
		<-done
		return r.live.Load() == before
	})
}

// TestStepRunnerIdleExits: a goroutine that waits its time for a step
// exits.
func TestStepRunnerIdleExits(t *testing.T) {
	r := newStepRunner(10 * time.Millisecond)
	done := make(chan struct{})
	r.run(func() { close(done) })
	<-done
	testnats.Eventually(t, 5*time.Second, "the idle goroutine exits", func() bool { return r.live.Load() == 0 })
}
