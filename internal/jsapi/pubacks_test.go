package jsapi_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestAckPublisherAnswers checks each kind of PubAck against a real
// server: stored (fast path), a lost compare-and-set (an API error), a
// duplicate (decoded in full), no stream at all, and no answer in time.
func TestAckPublisherAnswers(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	ctx := testnats.Context(t, 20*time.Second)
	nc := env.Conn(t, "admin")
	pub, err := jsapi.NewAckPublisher(nc, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	// Pipelined: both sent before either is awaited.
	a, err := pub.Publish(jsapi.KVUpdateMsg(streams.BucketResults, "a", []byte("1"), 0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := pub.Publish(jsapi.KVUpdateMsg(streams.BucketResults, "b", []byte("2"), 0))
	if err != nil {
		t.Fatal(err)
	}
	for key, f := range map[string]*jsapi.PendingAck{"a": a, "b": b} {
		rev, err := f.Wait(ctx)
		if err != nil {
			t.Fatalf("write %s: %v", key, err)
		}
		e, err := kv.Get(ctx, key)
		if err != nil || e.Revision() != rev {
			t.Fatalf("key %s: entry %v (%v), want revision %d", key, e, err, rev)
		}
	}

	// A compare-and-set that lost: the stream's error, as jetstream gives it.
	c, err := pub.Publish(jsapi.KVUpdateMsg(streams.BucketResults, "a", []byte("x"), 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(ctx); !jsapi.IsRevisionConflict(err) {
		t.Fatalf("second create of a: %v, want a revision conflict", err)
	}

	// A duplicate answers with the first copy's sequence.
	dup := func() *nats.Msg {
		m := nats.NewMsg("$KV." + streams.BucketResults + ".d")
		m.Data = []byte("1")
		m.Header.Set(jetstream.MsgIDHeader, "d-1")
		return m
	}
	first, err := pub.Publish(dup())
	if err != nil {
		t.Fatal(err)
	}
	rev1, err := first.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := pub.Publish(dup())
	if err != nil {
		t.Fatal(err)
	}
	<-second.Done()
	if rev2, err := second.Result(); err != nil || rev2 != rev1 {
		t.Fatalf("duplicate: %d, %v; want %d", rev2, err, rev1)
	}

	// No stream takes the subject.
	none, err := pub.Publish(&nats.Msg{Subject: "nostream.here", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := none.Wait(ctx); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("no stream: %v, want ErrNoStreamResponse", err)
	}

	// Something that never answers: a wait without a deadline gives up at
	// the publisher's timeout, and one whose context ends gives up then.
	sub, err := nc.SubscribeSync("silent.here")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	silent, err := pub.Publish(&nats.Msg{Subject: "silent.here", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := silent.Wait(context.Background()); !errors.Is(err, jsapi.ErrPubAckTimeout) {
		t.Fatalf("silent: %v, want ErrPubAckTimeout", err)
	}
	silent, err = pub.Publish(&nats.Msg{Subject: "silent.here", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer dcancel()
	if _, err := silent.Wait(dctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("silent, with a deadline: %v, want context.DeadlineExceeded", err)
	}
	cctx, cancel := context.WithCancel(context.Background())
	cancel()
	silent, err = pub.Publish(&nats.Msg{Subject: "silent.here", Data: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := silent.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v, want context.Canceled", err)
	}

	if _, err := pub.Publish(&nats.Msg{Subject: "x", Reply: "y"}); err == nil {
		t.Fatal("a message with a reply subject was published")
	}
}
