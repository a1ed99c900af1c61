package jsapi

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// HeldAck acknowledges consumed messages of a stream that removes what
// is acknowledged (work-queue or interest retention), but holds back the
// acknowledgement of the newest one (the highest stream sequence) until a
// newer one is acknowledged or Hold passes.
//
// Why: the file store deletes a message block once its last message is
// removed, and when that block is the one being written it opens a new
// block file for the next message. A stream whose consumer keeps up, at
// a moderate rate, empties after nearly every message, so each
// acknowledgement would cost a file created, a tombstone written and a
// file removed: on the benchmark machine that was about 180 µs of the
// server's CPU per message, more than the rest of the message's way. The
// newest message is always in the block being written; while it stays,
// that block never empties.
//
// How long: a little longer than the gap between the newest messages
// acknowledged so far (four times its running average, at least MinHold,
// at most Hold), so that a newer one nearly always comes first while
// messages flow, and the last of a burst is acknowledged a few gaps after
// it: a stream that stops empties soon, once.
//
// What it costs: the newest message stays stored, and counted as pending
// on its consumer, for that long after its work is done. A process that
// dies in that time leaves it to be redelivered after the consumer's
// AckWait, so whoever consumes through a HeldAck must treat a message
// whose work is already done as done (which every consumer of a
// work-queue stream must anyway: a crash between the work and the
// acknowledgement does the same). Hold must stay well below AckWait.
//
// Safe for concurrent use.
type HeldAck struct {
	// Hold bounds how long the newest message waits for a newer one
	// (DefaultHold when not set); MinHold is the least it waits
	// (DefaultMinHold when not set).
	Hold, MinHold time.Duration

	mu sync.Mutex
	// newest is, by stream, the newest message acknowledged through this
	// HeldAck; its msg is nil once acknowledged.
	newest map[string]heldMsg
	timer  *time.Timer
	closed bool
	// last is when the newest message was last replaced, gap the running
	// average of the time between replacements.
	last time.Time
	gap  time.Duration
}

type heldMsg struct {
	msg jetstream.Msg
	seq uint64
}

// DefaultHold and DefaultMinHold bound a HeldAck's hold when the fields
// are not set. Below about 1/DefaultHold messages a second the file churn
// the hold avoids costs nothing that matters.
const (
	DefaultHold    = 250 * time.Millisecond
	DefaultMinHold = time.Millisecond
)

// Ack acknowledges m, or holds its acknowledgement back when m is the
// newest message of its stream acknowledged so far (acknowledging the
// one held before). The error is the publish error of what is
// acknowledged now; a held acknowledgement that later fails is
// redelivered after AckWait, as any lost acknowledgement is.
func (h *HeldAck) Ack(m jetstream.Msg) error {
	d, err := DeliveryOf(m.Reply())
	if err != nil {
		return m.Ack()
	}
	h.mu.Lock()
	cur := h.newest[d.Stream]
	if h.closed || d.StreamSeq <= cur.seq {
		h.mu.Unlock()
		return m.Ack()
	}
	if h.newest == nil {
		h.newest = map[string]heldMsg{}
	}
	h.newest[d.Stream] = heldMsg{msg: m, seq: d.StreamSeq}
	hold := h.holdLocked(time.Now())
	if h.timer == nil {
		h.timer = time.AfterFunc(hold, h.release)
	} else {
		h.timer.Reset(hold)
	}
	h.mu.Unlock()
	if cur.msg != nil {
		return cur.msg.Ack()
	}
	return nil
}

// holdLocked notes a newest message replaced at now and returns how long
// to hold it; h.mu is held.
func (h *HeldAck) holdLocked(now time.Time) time.Duration {
	if !h.last.IsZero() {
		h.gap += (now.Sub(h.last) - h.gap) / 8
	}
	h.last = now
	lo, hi := h.MinHold, h.Hold
	if lo <= 0 {
		lo = DefaultMinHold
	}
	if hi <= 0 {
		hi = DefaultHold
	}
	return min(hi, max(lo, 4*h.gap))
}

// release acknowledges the messages held.
func (h *HeldAck) release() {
	var held []jetstream.Msg
	h.mu.Lock()
	for stream, n := range h.newest {
		if n.msg != nil {
			held = append(held, n.msg)
			h.newest[stream] = heldMsg{seq: n.seq}
		}
	}
	h.mu.Unlock()
	for _, m := range held {
		_ = m.Ack() // lost: redelivered after AckWait, and found done
	}
}

// Close acknowledges the messages held and holds none from then on: call
// it on the way out, while the connection is still open.
func (h *HeldAck) Close() {
	h.mu.Lock()
	h.closed = true
	if h.timer != nil {
		h.timer.Stop()
	}
	h.mu.Unlock()
	h.release()
}
