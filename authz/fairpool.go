package authz

import "sync"

// fairPool runs requests on a fixed set of long-lived goroutines, fairly
// across callers. A request handled on a goroutine of its own paid for the
// goroutine and for growing its stack through the decoding and encoding of
// every request; a worker keeps its stack from one request to the next.
//
// Each caller has its own queue, and a free worker takes the next request
// from the callers in turn: however many requests one caller has waiting,
// another's waits for at most one of them. A caller holds at most its limit
// of requests at once (running or waiting), and runs at most share of them
// at once, so that the workers beyond share are left to the others even
// while the caller has work waiting.
type fairPool struct {
	share int

	mu      sync.Mutex
	work    sync.Cond // signalled when a request is queued or the pool stops
	callers map[string]*callerQueue
	// turn lists the callers with a request a worker may take now, in the
	// order they get their turn.
	turn    []*callerQueue
	stopped bool
	wg      sync.WaitGroup
}

// callerQueue is one caller's requests: those waiting, in order, and how
// many of them run.
type callerQueue struct {
	user    string
	waiting []func()
	running int
	inTurn  bool
}

// startFairPool starts n workers; one caller runs at most share requests at
// once (at least 1, at most n).
func startFairPool(n, share int) *fairPool {
	n = max(n, 1)
	p := &fairPool{share: min(max(share, 1), n), callers: map[string]*callerQueue{}}
	p.work.L = &p.mu
	for range n {
		p.wg.Go(p.loop)
	}
	return p
}

// add queues f to run for user, unless user already holds limit requests;
// it never waits. It reports whether f was queued.
func (p *fairPool) add(user string, limit int, f func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.callers[user]
	if q == nil {
		q = &callerQueue{user: user}
	}
	if q.running+len(q.waiting) >= max(limit, 1) {
		return false
	}
	p.callers[user] = q
	q.waiting = append(q.waiting, f)
	p.enqueue(q)
	return true
}

// enqueue gives q a turn when it has a request it may run now. Called with
// mu held.
func (p *fairPool) enqueue(q *callerQueue) {
	if q.inTurn || len(q.waiting) == 0 || q.running >= p.share {
		return
	}
	q.inTurn = true
	p.turn = append(p.turn, q)
	p.work.Signal()
}

func (p *fairPool) loop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		for len(p.turn) == 0 && !p.stopped {
			p.work.Wait()
		}
		if len(p.turn) == 0 {
			return // stopped, and nothing is left to run
		}
		q := p.turn[0]
		p.turn[0] = nil
		p.turn = p.turn[1:]
		q.inTurn = false
		f := q.waiting[0]
		q.waiting[0] = nil
		q.waiting = q.waiting[1:]
		q.running++
		p.enqueue(q) // its next request waits behind the other callers'
		p.mu.Unlock()
		f()
		p.mu.Lock()
		q.running--
		if q.running == 0 && len(q.waiting) == 0 {
			delete(p.callers, q.user)
		} else {
			p.enqueue(q)
		}
	}
}

// stop ends the workers once they have run every request queued. Call it
// once, when nothing can call add any more.
func (p *fairPool) stop() {
	p.mu.Lock()
	p.stopped = true
	p.work.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}
