package jsapi_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/testnats"
)

// heldBed is a work-queue stream HELD and its durable pull consumer.
type heldBed struct {
	env *testnats.Env
	ctx context.Context
	js  jetstream.JetStream
	c   jetstream.Consumer
	n   int
}

func newHeldBed(t *testing.T) *heldBed {
	t.Helper()
	env := testnats.Start(t, nil)
	b := &heldBed{env: env, ctx: testnats.Context(t, 30*time.Second), js: env.JS(t, "admin")}
	s, err := b.js.CreateStream(b.ctx, jetstream.StreamConfig{Name: "HELD", Subjects: []string{"held.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	b.c, err = s.CreateConsumer(b.ctx, jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// take publishes k messages and fetches them.
func (b *heldBed) take(t *testing.T, k int) []jetstream.Msg {
	t.Helper()
	for range k {
		b.n++
		if _, err := b.js.Publish(b.ctx, "held.x", fmt.Appendf(nil, "m%d", b.n)); err != nil {
			t.Fatal(err)
		}
	}
	batch, err := b.c.Fetch(k, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != k {
		t.Fatalf("fetched %d messages, want %d", len(msgs), k)
	}
	return msgs
}

// pending is how many messages the consumer counts as delivered and not
// acknowledged.
func (b *heldBed) pending(t *testing.T) int {
	t.Helper()
	ci, err := b.c.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ci.NumAckPending
}

// waitPending waits until the consumer counts want pending.
func (b *heldBed) waitPending(t *testing.T, want int, what string) {
	t.Helper()
	testnats.Eventually(t, 5*time.Second, fmt.Sprintf("%s: %d pending", what, want), func() bool { return b.pending(t) == want })
}

// The newest message's acknowledgement waits for a newer one or the hold;
// an older one's goes at once; Close sends the one held.
func TestHeldAckHoldsOnlyTheNewest(t *testing.T) {
	b := newHeldBed(t)
	h := &jsapi.HeldAck{Hold: time.Hour, MinHold: time.Hour}
	msgs := b.take(t, 3)
	for i, want := range []struct {
		ack     int
		pending int
	}{
		{ack: 1, pending: 3}, // the newest so far: held
		{ack: 0, pending: 2}, // older: acknowledged at once
		{ack: 2, pending: 1}, // newer: held, and the one held before acknowledged
	} {
		if err := h.Ack(msgs[want.ack]); err != nil {
			t.Fatal(err)
		}
		b.waitPending(t, want.pending, fmt.Sprintf("step %d", i))
	}
	h.Close()
	b.waitPending(t, 0, "after Close")
	// Closed, it holds nothing.
	late := b.take(t, 1)
	if err := h.Ack(late[0]); err != nil {
		t.Fatal(err)
	}
	b.waitPending(t, 0, "acknowledged after Close")
}

// With nothing newer, the held acknowledgement goes once the hold passes.
func TestHeldAckReleasedAfterHold(t *testing.T) {
	b := newHeldBed(t)
	h := &jsapi.HeldAck{Hold: 20 * time.Millisecond}
	t.Cleanup(h.Close)
	for _, m := range b.take(t, 2) {
		if err := h.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	b.waitPending(t, 0, "after the hold")
}

// The hold follows the gap between the messages acknowledged: after a
// quick run of them the last is acknowledged a few gaps later, not after
// Hold.
func TestHeldAckFollowsTheGap(t *testing.T) {
	b := newHeldBed(t)
	h := &jsapi.HeldAck{Hold: time.Hour}
	t.Cleanup(h.Close)
	for _, m := range b.take(t, 50) {
		if err := h.Ack(m); err != nil {
			t.Fatal(err)
		}
	}
	b.waitPending(t, 0, "after a quick run")
}

// What the hold is for: a consumer that keeps up empties a work-queue
// stream after every message, and the file store then replaces its block
// file each time. Holding the newest acknowledgement keeps the block.
func TestHeldAckKeepsTheBlock(t *testing.T) {
	const rounds = 20
	for _, tc := range []struct {
		name  string
		ack   func(h *jsapi.HeldAck, m jetstream.Msg) error
		churn bool
	}{
		{name: "plain acknowledgements", ack: func(_ *jsapi.HeldAck, m jetstream.Msg) error { return m.Ack() }, churn: true},
		{name: "held acknowledgements", ack: (*jsapi.HeldAck).Ack},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newHeldBed(t)
			h := &jsapi.HeldAck{Hold: time.Hour, MinHold: time.Hour}
			t.Cleanup(h.Close)
			first := b.env.LastBlock(t, "HELD")
			for range rounds {
				m := b.take(t, 1)[0]
				if err := tc.ack(h, m); err != nil {
					t.Fatal(err)
				}
				// The next message is published once this one is gone
				// (or held): the stream keeps up, as a drained queue does.
				want := 0
				if !tc.churn {
					want = 1
				}
				b.waitPending(t, want, "round")
			}
			grew := b.env.LastBlock(t, "HELD") - first
			switch {
			case tc.churn && grew < rounds/2:
				t.Fatalf("the block file changed %d times in %d rounds: the file store no longer replaces an emptied block, and HeldAck may have lost its reason", grew, rounds)
			case !tc.churn && grew != 0:
				t.Fatalf("the block file changed %d times in %d rounds, want 0", grew, rounds)
			}
		})
	}
}
