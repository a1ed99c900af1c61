package drain

import "sync"

// Gate admits units of work until it is closed, then refuses them, and
// lets the closer wait for the units it admitted. Its zero value is open.
// It is safe for concurrent use.
//
// The admission and the WaitGroup Add happen under one lock, so no Add can
// follow Close: Wait never races an Add, and nothing admitted escapes it.
type Gate struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// Enter admits one unit of work and returns true, or returns false once
// the gate is closed. Each true must be followed by exactly one Leave.
func (g *Gate) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	return true
}

// Leave ends a unit admitted by Enter.
func (g *Gate) Leave() { g.wg.Done() }

// Go runs f on a new goroutine as part of the work of a caller that holds
// an admission (between its Enter and Leave); Wait waits for f too. It never
// refuses: the work was admitted when its caller entered.
func (g *Gate) Go(f func()) { g.wg.Go(f) }

// Close refuses every later Enter. It does not wait; see Wait.
func (g *Gate) Close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}

// Wait blocks until every admitted unit, and every goroutine started with
// Go, has finished. Call it after Close.
func (g *Gate) Wait() { g.wg.Wait() }
