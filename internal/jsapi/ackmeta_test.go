package jsapi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/testnats"
)

// FuzzDeliveryOf: on any reply subject, DeliveryOf and MetadataOf give
// what nats.go's own parse (Msg.Metadata) gives, field for field, and fail
// where it fails.
func FuzzDeliveryOf(f *testing.F) {
	for _, s := range []string{
		"$JS.ACK.HIGH.proc-pay.1.42.42.1764160000000000000.7",
		"$JS.ACK._.ACCHASH.HIGH.proc-pay.3.42.40.1764160000000000000.0.rand",
		"$JS.ACK.hub.ACCHASH.CALLBACKS.authz.2.9.9.1764160000000000000.0",
		"$JS.ACK.HIGH.proc-pay.x.42.42.1764160000000000000.7",
		"$JS.ACK.HIGH.proc-pay.1.42.42",
		"$JS.ACK.a.b.c.d.e.f.g.h",
		"$JS.ACK.a.b.c.d.e.f.g.h.i.j.k.l",
		"$JS.ACK.HIGH.proc-pay.18446744073709551616.1.1.1.1",
		"_INBOX.x.y",
		"$JS.ACK.",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, reply string) {
		want, werr := (&nats.Msg{Reply: reply, Sub: &nats.Subscription{}}).Metadata()
		got, gerr := jsapi.DeliveryOf(reply)
		if (werr == nil) != (gerr == nil) || errors.Is(werr, nats.ErrMsgNoReply) != errors.Is(gerr, jetstream.ErrMsgNoReply) {
			t.Fatalf("%q: DeliveryOf error %v, Metadata error %v", reply, gerr, werr)
		}
		if _, merr := jsapi.MetadataOf(reply); (merr == nil) != (werr == nil) {
			t.Fatalf("%q: MetadataOf error %v, Metadata error %v", reply, merr, werr)
		}
		if werr != nil {
			return
		}
		if got.Stream != want.Stream || got.NumDelivered != want.NumDelivered || got.StreamSeq != want.Sequence.Stream || !got.Timestamp.Equal(want.Timestamp) {
			t.Fatalf("%q: DeliveryOf %+v, Metadata %+v", reply, got, want)
		}
		md, err := jsapi.MetadataOf(reply)
		if err != nil {
			t.Fatalf("%q: MetadataOf: %v, where Metadata parses", reply, err)
		}
		if md.Domain != want.Domain || md.Stream != want.Stream || md.Consumer != want.Consumer ||
			md.NumDelivered != want.NumDelivered || md.NumPending != want.NumPending ||
			md.Sequence.Stream != want.Sequence.Stream || md.Sequence.Consumer != want.Sequence.Consumer ||
			!md.Timestamp.Equal(want.Timestamp) {
			t.Fatalf("%q: MetadataOf %+v, Metadata %+v", reply, md, want)
		}
	})
}

// TestDeliveryOfConsumedMessages: on messages a real consumer delivers,
// first and again, DeliveryOf reads what jetstream's Metadata reads.
func TestDeliveryOfConsumedMessages(t *testing.T) {
	env := testnats.Start(t, nil)
	ctx := testnats.Context(t, 20*time.Second)
	js := env.JS(t, "admin")
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "DELIVERY", Subjects: []string{"delivery.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := js.Publish(ctx, "delivery.x", []byte("m")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "d", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	check := func(wantDelivered uint64) {
		t.Helper()
		b, err := c.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		var got []jetstream.Msg
		for m := range b.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			d, err := jsapi.DeliveryOf(m.Reply())
			if err != nil {
				t.Fatal(err)
			}
			if d.Stream != md.Stream || d.NumDelivered != wantDelivered || d.NumDelivered != md.NumDelivered || d.StreamSeq != md.Sequence.Stream ||
				!d.Timestamp.Equal(md.Timestamp) || d.Timestamp.IsZero() {
				t.Fatalf("DeliveryOf %+v, Metadata %+v, want delivery %d", d, md, wantDelivered)
			}
			got = append(got, m)
		}
		if n != 3 {
			t.Fatalf("fetched %d messages, want 3", n)
		}
		// Asked again only once all three are in hand, so that none comes
		// back within the same fetch.
		for _, m := range got {
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
		}
	}
	check(1)
	check(2)
}
