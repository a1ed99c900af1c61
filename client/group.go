package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/tickflow/tickflow/api"
)

// DefaultSendsInFlight is Config.SendsInFlight when it is zero: authz's
// default max_requests, the requests one caller may have in flight.
const DefaultSendsInFlight = 16

// A Client keeps at most Config.SendsInFlight send requests in flight for
// plain batches (no key, no schedule; an idempotency key or none). A plain Send
// that finds them all taken waits in the client, and when one of them is
// answered the batches waiting go out together, as one send_many request
// (sendGroup): authz writes a send_many's plain batches together, at a
// fraction of the cost of a request each, and a caller with many
// goroutines sending at once is not refused for having more requests in
// flight than its max_requests. A Send that finds a request free goes out
// alone at once while at most half of them are taken, as it always did,
// so a caller that sends one batch at a time waits for no other. One that
// takes a slot beyond half first yields the processor once and takes the
// Sends that came meanwhile along: under load, the callers of a request
// just answered send again at once, and each that found a slot free went
// out alone (about half of all requests, in a burst from 256 goroutines).
//
// Each batch of a group is answered as its own send would be: queued, or
// refused for what it asks. What would not have happened to the same
// sends one at a time is undone by sending them one at a time: a group
// refused whole for the caller's send rate or burst (a single send might
// still fit), and its batches that authz did not start after a failure
// inside it (503, not submitted).

// sendGroups holds the plain sends of a Client waiting for a request to
// go out in. Sends wait only while every slot is taken (inFlight == max):
// a slot freed is handed to the sends waiting, if any.
type sendGroups struct {
	max int // requests in flight; < 0: never group

	mu       sync.Mutex
	inFlight int
	waiting  []*groupedSend
}

// groupedSend is a plain Send waiting in sendGroups: data is its request
// as JSON; done is closed once rep or err is set.
type groupedSend struct {
	ctx  context.Context
	data []byte
	rep  *api.SendReply
	err  error
	done chan struct{}
}

// plainSend says whether req is a batch authz may write together with
// others: no key (an order to join), no schedule. An idempotency key is
// taken together with the others' (a repeat is then answered alone).
func plainSend(req *api.SendRequest) bool {
	return req.Key == "" && req.RunAt == "" && req.Delay == ""
}

// sendPlain submits plain req: alone at once while at most half the
// slots are taken, with the sends that come while it yields when it takes
// a slot beyond half, and otherwise with the sends waiting beside it, in
// the next request to go out.
func (c *Client) sendPlain(ctx context.Context, req api.SendRequest) (*api.SendReply, error) {
	g := &c.groups
	taken, busy := g.takeSlot()
	if taken && !busy {
		return c.sendAlone(ctx, req)
	}
	// Encoded outside the lock, the many callers at once in parallel.
	data, err := encodeSend(&req)
	if err != nil {
		if taken {
			c.nextGroup(false)
		}
		return nil, fmt.Errorf("client: %s: encode request: %w", api.OpSend, err)
	}
	s := &groupedSend{ctx: ctx, data: data, done: make(chan struct{})}
	if taken {
		// A slot freed while most are taken: the callers of a request
		// just answered are runnable and about to send again, and each
		// that found a slot free would go out alone. Yield the processor
		// once (a yield, not a timer: with nothing else runnable it
		// returns at once), then take the sends that came meanwhile and
		// found every slot taken, and send them with this one.
		leadYield()
		g.mu.Lock()
		group := c.takeGroup(s)
		g.mu.Unlock()
		if len(group) == 1 {
			// None came: alone, as a send that found most slots free,
			// its slot handed on before it returns.
			defer c.nextGroup(false)
			return callRaw[api.SendReply](ctx, c, api.OpSend, data)
		}
		go c.sendGroup(group)
		return c.awaitGrouped(ctx, s)
	}
	g.mu.Lock()
	// Sends wait only while every slot is taken: a slot freed meanwhile
	// (none waited then) is this one's.
	if g.inFlight < g.max {
		g.inFlight++
		g.mu.Unlock()
		defer c.nextGroup(false)
		return callRaw[api.SendReply](ctx, c, api.OpSend, data) // as encoded, not again
	}
	g.waiting = append(g.waiting, s)
	g.mu.Unlock()
	return c.awaitGrouped(ctx, s)
}

// leadYield is where a send that took a slot while most are taken lets
// the callers that are runnable send first (runtime.Gosched; a test
// makes sends arrive there).
var leadYield = runtime.Gosched

// awaitGrouped waits for s, a plain send waiting for a request or in a
// group on its way, to be answered, or for ctx to end: a send still
// waiting is then taken out and not sent.
func (c *Client) awaitGrouped(ctx context.Context, s *groupedSend) (*api.SendReply, error) {
	g := &c.groups
	select {
	case <-s.done:
		return s.rep, s.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	select {
	case <-s.done:
		// Answered meanwhile.
		g.mu.Unlock()
		return s.rep, s.err
	default:
	}
	for i, w := range g.waiting {
		if w == s {
			// Still waiting: it is not sent at all.
			g.waiting = append(g.waiting[:i], g.waiting[i+1:]...)
			g.mu.Unlock()
			return nil, fmt.Errorf("client: %s: %w (not sent: it waited for a request to go out in)", api.OpSend, ctx.Err())
		}
	}
	g.mu.Unlock()
	// On its way: as a send whose answer did not come in time, it may be
	// queued.
	return nil, c.gaveUp(ctx, api.OpSend)
}

// takeSlot takes a request slot if one is free; busy says that, with it,
// more than half the slots are taken.
func (g *sendGroups) takeSlot() (taken, busy bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight < g.max {
		g.inFlight++
		return true, g.inFlight > g.max/2
	}
	return false, false
}

// sendAlone sends req as one send in a slot taken, then hands the slot on.
func (c *Client) sendAlone(ctx context.Context, req api.SendRequest) (*api.SendReply, error) {
	defer c.nextGroup(false)
	return c.sendNow(ctx, &req)
}

// sendNow sends req as one send request, at once.
func (c *Client) sendNow(ctx context.Context, req *api.SendRequest) (*api.SendReply, error) {
	data, err := encodeSend(req)
	if err != nil {
		return nil, fmt.Errorf("client: %s: encode request: %w", api.OpSend, err)
	}
	return callRaw[api.SendReply](ctx, c, api.OpSend, data)
}

// encodeSendMany encodes a send_many request as JSON, each batch as
// encodeSend does.
func encodeSendMany(req *api.SendManyRequest) ([]byte, error) {
	if req.Batches == nil {
		return json.Marshal(req)
	}
	data := append(make([]byte, 0, 64+128*len(req.Batches)), `{"batches":[`...)
	for i := range req.Batches {
		if i > 0 {
			data = append(data, ',')
		}
		var ok bool
		if data, ok = req.Batches[i].AppendJSON(data); !ok {
			return json.Marshal(req)
		}
	}
	return append(data, `]}`...), nil
}

// encodeSend encodes a send request as JSON, without reflection when its
// strings need no escaping (api.SendRequest.AppendJSON).
func encodeSend(req *api.SendRequest) ([]byte, error) {
	if data, ok := req.AppendJSON(make([]byte, 0, 128)); ok {
		return data, nil
	}
	return json.Marshal(req)
}

// nextGroup hands the request slot of a send just answered to the sends
// waiting, if any (on a goroutine of its own, so that the send's caller
// has its answer at once), or frees it. With yield (a group's request,
// on a goroutine of its own), when none waits it first yields the
// processor once: the callers the group just answered are runnable, and
// one that sends again at once then joins the next group rather than
// finding the slot free and going out alone. A yield, not a timer: with
// nothing else runnable it returns at once. A send that went alone hands
// its slot on without yielding, so that its caller's answer waits for
// nothing.
func (c *Client) nextGroup(yield bool) {
	g := &c.groups
	g.mu.Lock()
	group := c.takeGroup(nil)
	if len(group) == 0 && yield {
		g.mu.Unlock()
		runtime.Gosched()
		g.mu.Lock()
		group = c.takeGroup(nil)
	}
	if len(group) == 0 {
		g.inFlight--
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	go c.sendGroup(group)
}

// takeGroup takes the sends waiting, oldest first, as many as one
// send_many request carries (api.MaxSendMany, and the server's
// max_payload), after lead if it is not nil (a send that holds a slot
// already, first in the group). Called with groups.mu held.
func (c *Client) takeGroup(lead *groupedSend) []*groupedSend {
	g := &c.groups
	limit := c.nc.MaxPayload()
	size := int64(len(`{"batches":[]}`))
	var group []*groupedSend
	if lead != nil {
		group = append(make([]*groupedSend, 0, 1+min(len(g.waiting), api.MaxSendMany-1)), lead)
		size += int64(len(lead.data))
	}
	n := 0
	for n < len(g.waiting) && len(group)+n < api.MaxSendMany {
		size += int64(len(g.waiting[n].data)) + 1
		if len(group)+n > 0 && limit > 0 && size > limit {
			break
		}
		n++
	}
	group = append(group, g.waiting[:n]...)
	g.waiting = append(g.waiting[:0], g.waiting[n:]...)
	return group
}

// sendGroup sends group, answers each of its sends, and then hands the
// request slot on (nextGroup). A group of one goes as the send it is.
func (c *Client) sendGroup(group []*groupedSend) {
	defer c.nextGroup(true)
	if len(group) == 1 {
		s := group[0]
		s.rep, s.err = callRaw[api.SendReply](s.ctx, c, api.OpSend, s.data)
		close(s.done)
		return
	}
	var body bytes.Buffer
	body.WriteString(`{"batches":[`)
	for i, s := range group {
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(s.data)
	}
	body.WriteString(`]}`)
	// No caller's context bounds the group: one caller giving up must not
	// cut the others' request short. Each caller still stops waiting at
	// its own deadline.
	rep, err := callRaw[api.SendManyReply](context.Background(), c, api.OpSendMany, body.Bytes())
	if err == nil && len(rep.Results) != len(group) {
		err = fmt.Errorf("client: %s: %d results for %d batches", api.OpSendMany, len(rep.Results), len(group))
	}
	var again []*groupedSend
	switch {
	case errors.Is(err, ErrTooManyRequests) || errors.Is(err, ErrBadRequest):
		// Refused whole (over the send rate or burst all at once, which
		// each alone might not be): nothing was submitted.
		again = group
	case err != nil:
		for _, s := range group {
			s.err = sendErr(err)
			close(s.done)
		}
	default:
		for i, s := range group {
			r := &rep.Results[i]
			switch {
			case notStarted(r):
				again = append(again, s)
				continue
			case r.Failed():
				s.err = &Error{Op: api.OpSend, Code: r.Code, Message: r.Error}
			default:
				s.rep = r.Reply()
			}
			close(s.done)
		}
	}
	// Each as the send it is (they were not submitted), at most as many
	// at once as the client keeps in flight.
	slots := make(chan struct{}, c.groups.max)
	var wg sync.WaitGroup
	for _, s := range again {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			s.rep, s.err = callRaw[api.SendReply](s.ctx, c, api.OpSend, s.data)
			close(s.done)
		})
	}
	wg.Wait()
}

// notStarted says a send_many result is a batch authz did not start after
// a failure inside the request: 503, not submitted, to be sent again.
func notStarted(r *api.SendManyResult) bool {
	return r.Code == api.CodeUnavailable && strings.HasPrefix(r.Error, api.NotSubmitted)
}

// sendErr is err, a send_many request's, as the send of one of its
// batches reports it.
func sendErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Op: api.OpSend, Code: e.Code, Message: e.Message}
	}
	return err
}
