package authz

import "sync"

// workers runs functions on a fixed set of long-lived goroutines. A
// request handled on a goroutine of its own paid for the goroutine and for
// growing its stack through the decoding and encoding of every request; a
// worker keeps its stack from one request to the next.
type workers struct {
	jobs chan func()
	wg   sync.WaitGroup
}

// startWorkers starts n workers.
func startWorkers(n int) *workers {
	w := &workers{jobs: make(chan func())}
	for range max(n, 1) {
		w.wg.Go(func() {
			for f := range w.jobs {
				f()
			}
		})
	}
	return w
}

// do runs f on a worker, waiting until one is free.
func (w *workers) do(f func()) { w.jobs <- f }

// stop ends the workers once they have run what they were given. Call it
// once, when nothing can call do any more.
func (w *workers) stop() {
	close(w.jobs)
	w.wg.Wait()
}
