package jsapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/testnats"
)

// fetchBed is a stream of n messages "m1"… and a durable pull consumer
// with explicit acks, and a Fetcher of it on its own connection.
type fetchBed struct {
	env *testnats.Env
	ctx context.Context
	js  jetstream.JetStream
	nc  *nats.Conn
	c   jetstream.Consumer
	f   *jsapi.Fetcher
}

func newFetchBed(t *testing.T, n int) *fetchBed {
	t.Helper()
	env := testnats.Start(t, nil)
	b := &fetchBed{env: env, ctx: testnats.Context(t, 30*time.Second), js: env.JS(t, "admin"), nc: env.Conn(t, "admin")}
	s, err := b.js.CreateStream(b.ctx, jetstream.StreamConfig{Name: "FETCH", Subjects: []string{"fetch.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := b.js.Publish(b.ctx, "fetch.x", fmt.Appendf(nil, "m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	b.c, err = s.CreateConsumer(b.ctx, jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	b.f = jsapi.NewFetcher(b.nc, "FETCH", "d", 0)
	return b
}

func (b *fetchBed) fetch(t *testing.T, n int) []jetstream.Msg {
	t.Helper()
	msgs, err := b.f.FetchNoWait(n)
	if err != nil {
		t.Fatalf("fetch %d: %v", n, err)
	}
	return msgs
}

func bodies(msgs []jetstream.Msg) string {
	var s []string
	for _, m := range msgs {
		s = append(s, string(m.Data()))
	}
	return strings.Join(s, ",")
}

// info reads the consumer's state once everything sent so far on the
// fetcher's connection has reached the server (acknowledgements may be
// applied later: settled waits for them).
func (b *fetchBed) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	if err := b.nc.FlushWithContext(b.ctx); err != nil {
		t.Fatal(err)
	}
	ci, err := b.c.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ci
}

// settled waits until the consumer's state, acknowledgements applied, is
// what want says.
func (b *fetchBed) settled(t *testing.T, what string, want func(*jetstream.ConsumerInfo) bool) {
	t.Helper()
	var ci *jetstream.ConsumerInfo
	testnats.Eventually(t, 10*time.Second, what, func() bool {
		ci = b.info(t)
		return want(ci)
	})
}

// TestFetcherTakesWhatIsThere: a fetch takes up to the batch asked for, in
// order, whether the stream holds more or fewer, and returns at once with
// nothing, and no error, from an empty consumer; the messages' metadata is
// the delivery's.
func TestFetcherTakesWhatIsThere(t *testing.T) {
	b := newFetchBed(t, 5)
	first := b.fetch(t, 3)
	if got := bodies(first); got != "m1,m2,m3" {
		t.Fatalf("first fetch: %s", got)
	}
	md, err := first[1].Metadata()
	if err != nil {
		t.Fatal(err)
	}
	if md.Stream != "FETCH" || md.Consumer != "d" || md.Sequence.Stream != 2 || md.Sequence.Consumer != 2 ||
		md.NumDelivered != 1 || md.NumPending != 3 || md.Timestamp.IsZero() || first[1].Subject() != "fetch.x" {
		t.Fatalf("metadata %+v of %s", md, first[1].Subject())
	}
	if rest := b.fetch(t, 10); bodies(rest) != "m4,m5" {
		t.Fatalf("second fetch: %s", bodies(rest))
	}
	if none := b.fetch(t, 10); len(none) != 0 {
		t.Fatalf("empty consumer gave %s", bodies(none))
	}
	if ci := b.info(t); ci.NumAckPending != 5 || ci.NumPending != 0 {
		t.Fatalf("ack pending %d, pending %d; want 5, 0", ci.NumAckPending, ci.NumPending)
	}
	// One subscription served the three fetches, one after another.
	if n := b.nc.NumSubscriptions(); n != 1 {
		t.Fatalf("%d subscriptions, want 1", n)
	}
}

// TestFetcherAcknowledgements: each acknowledgement does to the delivery
// what jetstream's does, and a message is settled once.
func TestFetcherAcknowledgements(t *testing.T) {
	b := newFetchBed(t, 6)
	terminated := make(chan *nats.Msg, 4)
	if _, err := b.nc.ChanSubscribe("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.FETCH.d", terminated); err != nil {
		t.Fatal(err)
	}
	msgs := b.fetch(t, 6)
	if len(msgs) != 6 {
		t.Fatalf("fetched %s", bodies(msgs))
	}
	if err := msgs[0].Ack(); err != nil {
		t.Fatal(err)
	}
	if err := msgs[0].Ack(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Fatalf("second ack: %v", err)
	}
	if err := msgs[0].InProgress(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Fatalf("progress after the ack: %v", err)
	}
	// The server has applied a double ack when it answers: m1's ack, sent
	// before, too.
	if err := msgs[1].DoubleAck(b.ctx); err != nil {
		t.Fatal(err)
	}
	if ci := b.info(t); ci.NumAckPending != 4 || ci.AckFloor.Stream != 2 {
		t.Fatalf("after the double ack: %d awaiting acknowledgement, floor %d; want 4, 2", ci.NumAckPending, ci.AckFloor.Stream)
	}
	// Applied in the order sent: m5 waits an hour, m6 and m3 come back
	// now, m4 never.
	if err := msgs[4].NakWithDelay(time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := msgs[5].NakWithDelay(0); err != nil {
		t.Fatal(err)
	}
	if err := msgs[3].TermWithReason("spoiled"); err != nil {
		t.Fatal(err)
	}
	if err := msgs[2].InProgress(); err != nil {
		t.Fatal(err)
	}
	if err := msgs[2].Nak(); err != nil {
		t.Fatal(err)
	}
	var again []jetstream.Msg
	testnats.Eventually(t, 10*time.Second, "the redeliveries", func() bool {
		again = append(again, b.fetch(t, 5)...)
		return len(again) >= 2
	})
	if got := bodies(again); got != "m3,m6" && got != "m6,m3" {
		t.Fatalf("redelivered %s, want m3 and m6", got)
	}
	if more := b.fetch(t, 5); len(more) != 0 {
		t.Fatalf("then %s, want nothing before the hour", bodies(more))
	}
	for _, m := range again {
		if md, err := m.Metadata(); err != nil || md.NumDelivered != 2 {
			t.Fatalf("redelivery of %s: %+v %v", m.Data(), md, err)
		}
		if string(m.Data()) == "m3" {
			if err := m.Term(); err != nil {
				t.Fatal(err)
			}
		} else if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
	}
	// Terminated: m4 with its reason, then m3.
	for _, want := range []struct {
		seq    uint64
		reason string
	}{{4, "spoiled"}, {3, ""}} {
		var adv struct {
			StreamSeq uint64 `json:"stream_seq"`
			Reason    string `json:"reason"`
		}
		select {
		case m := <-terminated:
			if err := json.Unmarshal(m.Data, &adv); err != nil {
				t.Fatal(err)
			}
		case <-b.ctx.Done():
			t.Fatalf("no termination advisory for m%d", want.seq)
		}
		if adv.StreamSeq != want.seq || adv.Reason != want.reason {
			t.Fatalf("terminated %+v, want m%d with reason %q", adv, want.seq, want.reason)
		}
	}
	b.settled(t, "m5 alone awaiting acknowledgement, floor 4", func(ci *jetstream.ConsumerInfo) bool {
		return ci.NumAckPending == 1 && ci.AckFloor.Stream == 4
	})
}

// TestFetcherErrors: a consumer that does not exist and a server that does
// not answer each say so, and a fetch left without its answer drops its
// subscription, so that what may still come for it never reaches a later
// fetch.
func TestFetcherErrors(t *testing.T) {
	b := newFetchBed(t, 0)
	subs := b.nc.NumSubscriptions()
	if _, err := jsapi.NewFetcher(b.nc, "FETCH", "nobody", 0).FetchNoWait(1); !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("no consumer: %v", err)
	}
	// A responder that never answers stands in for a lost answer.
	if _, err := b.nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT.FETCH.silent", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	subs++
	if err := b.nc.FlushWithContext(b.ctx); err != nil {
		t.Fatal(err)
	}
	silent := jsapi.NewFetcher(b.nc, "FETCH", "silent", 20*time.Millisecond)
	for range 3 {
		if _, err := silent.FetchNoWait(1); !errors.Is(err, jsapi.ErrFetchNoAnswer) {
			t.Fatalf("no answer: %v", err)
		}
		if n := b.nc.NumSubscriptions(); n != subs {
			t.Fatalf("%d subscriptions after fetches without answers, want %d", n, subs)
		}
	}
}

// TestFetcherConsumerAtMaxAckPending: a consumer that holds as many
// messages as its MaxAckPending leaves a no-wait fetch unanswered while it
// has more to deliver; the fetch ends after its silence with
// ErrFetchNoAnswer and drops its subscription, and a fetch after an
// acknowledgement frees a slot takes the next message.
func TestFetcherConsumerAtMaxAckPending(t *testing.T) {
	b := newFetchBed(t, 2)
	s, err := b.js.Stream(b.ctx, "FETCH")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateConsumer(b.ctx, jetstream.ConsumerConfig{Durable: "one", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 1, AckWait: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	f := jsapi.NewFetcher(b.nc, "FETCH", "one", 50*time.Millisecond)
	// One message, then silence: the consumer may hand out no more.
	first, err := f.FetchNoWait(2)
	if bodies(first) != "m1" || !errors.Is(err, jsapi.ErrFetchNoAnswer) {
		t.Fatalf("first fetch: %s %v, want m1 and ErrFetchNoAnswer", bodies(first), err)
	}
	if none, err := f.FetchNoWait(1); len(none) != 0 || !errors.Is(err, jsapi.ErrFetchNoAnswer) {
		t.Fatalf("at max ack pending: %s %v, want nothing and ErrFetchNoAnswer", bodies(none), err)
	}
	if n := b.nc.NumSubscriptions(); n != 0 {
		t.Fatalf("%d subscriptions kept after unanswered fetches, want 0", n)
	}
	if err := first[0].Ack(); err != nil {
		t.Fatal(err)
	}
	var next []jetstream.Msg
	testnats.Eventually(t, 10*time.Second, "m2 once m1 is acknowledged", func() bool {
		msgs, err := f.FetchNoWait(1)
		if err != nil && !errors.Is(err, jsapi.ErrFetchNoAnswer) {
			t.Fatal(err)
		}
		next = msgs
		return len(next) > 0
	})
	if bodies(next) != "m2" {
		t.Fatalf("then %s, want m2", bodies(next))
	}
}

// TestFetcherConcurrent: fetches made at once on one fetcher share its
// subscription and never take a message twice.
func TestFetcherConcurrent(t *testing.T) {
	const n = 600
	b := newFetchBed(t, n)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				mu.Lock()
				all := len(seen) == n
				mu.Unlock()
				if all || b.ctx.Err() != nil {
					return
				}
				// One fetch may find nothing while the others' requests
				// hold the rest: ask again until every message is taken.
				msgs, err := b.f.FetchNoWait(7)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, m := range msgs {
					seen[string(m.Data())]++
					if err := m.Ack(); err != nil {
						t.Error(err)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d messages taken, want %d", len(seen), n)
	}
	for body, k := range seen {
		if k != 1 {
			t.Fatalf("%s taken %d times", body, k)
		}
	}
	if n := b.nc.NumSubscriptions(); n < 1 || n > 8 {
		t.Fatalf("%d subscriptions kept for 8 fetchers' many fetches, want 1 to 8", n)
	}
	b.settled(t, "nothing pending", func(ci *jetstream.ConsumerInfo) bool {
		return ci.NumAckPending == 0 && ci.NumPending == 0
	})
}
