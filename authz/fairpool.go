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

// callerQueue is one caller's requests: those waiting, in order, how many
// of them run, and how many it holds (queued and not yet released).
type callerQueue struct {
	user    string
	waiting []func(release func())
	running int
	// held counts the requests the caller holds against its limit: each
	// from add until its release, which the request calls as it answers,
	// so a caller that sends its next request the moment it has an answer
	// is not refused for the one still winding down on its worker.
	held   int
	inTurn bool
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
// it never waits. It reports whether f was queued. f receives release,
// which gives back the request's place in the caller's limit: f calls it
// just before it answers, and it is called for f when f returns without.
func (p *fairPool) add(user string, limit int, f func(release func())) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.callers[user]
	if q == nil {
		q = &callerQueue{user: user}
	}
	if q.held >= max(limit, 1) {
		return false
	}
	p.callers[user] = q
	q.held++
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
		released := false
		release := func() {
			if released {
				return
			}
			released = true
			p.mu.Lock()
			q.held--
			p.mu.Unlock()
		}
		f(release)
		release()
		p.mu.Lock()
		q.running--
		if q.running == 0 && q.held == 0 && len(q.waiting) == 0 {
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
