package processor

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// maxCallbackFlights bounds the callback messages one processor has on
// their way to CALLBACKS at once; the callbacks of the steps that end
// meanwhile wait and go together in the next message (group commit), as
// the units of a wave go to the workers together (unitBatcher). A
// processor serves one domain, so this is also per callback subject: a
// second processor of the domain has its own two.
const maxCallbackFlights = 2

// callbackGroupHeadroom is kept free of max_payload beside a group's body,
// for its headers.
const callbackGroupHeadroom = 4 << 10

// callbackMemberPatience is how long the acker waits for a callback handed
// to the grouper: a flight resolves its members within its PubAck's
// timeout, and one may wait for the two before it.
const callbackMemberPatience = 3*pubAckTimeout + time.Second

// callbackGrouper publishes the callbacks of tokens taken by a tick
// (deferred) in groups: while maxCallbackFlights messages are on their
// way, the callbacks that come wait, and the next flight takes as many as
// fit (records.CallbackGroupMax, and max_payload) as one CallbackGroup. A
// lone callback goes at once, as a single callback with its deduplication
// id; nothing waits for more to come. Each member's token is acknowledged
// once its message's PubAck has arrived (acker), and put back if the
// message was not stored.
type callbackGrouper struct {
	async    *jsapi.AckPublisher
	domain   string
	maxBytes int
	fault    crashPoints

	mu      sync.Mutex
	waiting []*groupMember
	flights int
	wg      sync.WaitGroup
}

// groupMember is a callback handed to the grouper: the write its token's
// acknowledgement waits for (pendingWrite).
type groupMember struct {
	msg      *nats.Msg // the callback alone (streams.CallbackMsg)
	deadline time.Time
	done     chan struct{}
	// seq and err are written once, before done is closed.
	seq uint64
	err error
}

func (m *groupMember) Done() <-chan struct{}   { return m.done }
func (m *groupMember) Deadline() time.Time     { return m.deadline }
func (m *groupMember) Result() (uint64, error) { return m.seq, m.err }

// Forget does nothing: the member's flight resolves it anyway.
func (m *groupMember) Forget() {}

// add hands over the callback msg (streams.CallbackMsg) to be published
// with whatever else waits, and returns the write its token waits for.
func (g *callbackGrouper) add(msg *nats.Msg) *groupMember {
	u := &groupMember{msg: msg, deadline: time.Now().Add(callbackMemberPatience), done: make(chan struct{})}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.waiting = append(g.waiting, u)
	if g.flights < maxCallbackFlights {
		g.flights++
		g.wg.Go(g.fly)
	}
	return u
}

// fly publishes what waits, a message at a time, until nothing does.
func (g *callbackGrouper) fly() {
	for {
		g.mu.Lock()
		group := g.take()
		if len(group) == 0 {
			g.flights--
			g.mu.Unlock()
			return
		}
		g.mu.Unlock()
		g.send(group)
	}
}

// take removes the callbacks the next message carries from waiting, the
// oldest first: at least one, then as many as fit.
func (g *callbackGrouper) take() []*groupMember {
	if len(g.waiting) == 0 {
		return nil
	}
	n, size := 1, records.CallbackGroupOverhead+len(g.waiting[0].msg.Data)
	for n < len(g.waiting) && n < records.CallbackGroupMax {
		size += len(g.waiting[n].msg.Data)
		if size > g.maxBytes {
			break
		}
		n++
	}
	taken := slices.Clone(g.waiting[:n])
	rest := copy(g.waiting, g.waiting[n:])
	clear(g.waiting[rest:])
	g.waiting = g.waiting[:rest]
	return taken
}

// send publishes group as one message (a lone callback as itself) and
// resolves its members with what became of it.
func (g *callbackGrouper) send(group []*groupMember) {
	seq, err := g.publish(group)
	for _, u := range group {
		u.seq, u.err = seq, err
		close(u.done)
	}
}

func (g *callbackGrouper) publish(group []*groupMember) (uint64, error) {
	msg := group[0].msg
	if len(group) > 1 {
		msgs := make([]*nats.Msg, len(group))
		for i, u := range group {
			msgs[i] = u.msg
		}
		var err error
		if msg, err = streams.JoinCallbacks(g.domain, msgs); err != nil {
			return 0, err
		}
	}
	pa, err := g.async.Publish(msg)
	if err != nil {
		return 0, fmt.Errorf("processor: publish %d callbacks: %w", len(group), err)
	}
	// The publisher's timeout bounds the wait.
	seq, err := pa.Wait(context.Background())
	if err != nil {
		return 0, err
	}
	if err := g.fault.at(faultAfterCallbackGroup); err != nil {
		return 0, err
	}
	return seq, nil
}

// wait waits until no flight is on its way.
func (g *callbackGrouper) wait() { g.wg.Wait() }
