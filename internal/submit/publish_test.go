package submit

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
	"github.com/tickflow/tickflow/pipeline"
)

// publishers are the two ways a token is published: by request
// (Publish) and through an AckPublisher (PublishAcked). Both answer alike.
func publishers(t *testing.T, env *testnats.Env) map[string]func(context.Context, *nats.Msg) (Ack, error) {
	js := env.JS(t, "authz")
	acks := newAcks(t, env)
	return map[string]func(context.Context, *nats.Msg) (Ack, error){
		"request": func(ctx context.Context, m *nats.Msg) (Ack, error) { return Publish(ctx, js, m) },
		"acked":   func(ctx context.Context, m *nats.Msg) (Ack, error) { return PublishAcked(ctx, js, acks, m) },
	}
}

func newAcks(t *testing.T, env *testnats.Env) *jsapi.AckPublisher {
	acks, err := jsapi.NewAckPublisher(env.Conn(t, "authz"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return acks
}

// TestCreateKeyAckedAnswersAsKVCreate: a created key returns its revision, an
// existing one ErrKeyExists, and a deleted one is created on its delete
// marker, as kv.Create does.
func TestCreateKeyAckedAnswersAsKVCreate(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 10*time.Second)
	kv, err := env.JS(t, "authz").KeyValue(ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	acks := newAcks(t, env)
	rev, err := CreateKeyAcked(ctx, acks, kv, "k1", []byte("a"))
	if err != nil || rev == 0 {
		t.Fatalf("first create: rev %d, err %v", rev, err)
	}
	if e, err := kv.Get(ctx, "k1"); err != nil || string(e.Value()) != "a" || e.Revision() != rev {
		t.Fatalf("stored: %v, %v", e, err)
	}
	if _, err := CreateKeyAcked(ctx, acks, kv, "k1", []byte("b")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second create: %v, want ErrKeyExists", err)
	}
	if err := kv.Delete(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if rev2, err := CreateKeyAcked(ctx, acks, kv, "k1", []byte("c")); err != nil || rev2 <= rev {
		t.Fatalf("create after delete: rev %d, err %v", rev2, err)
	}
}

// TestPublishAnswersAsPublishMsg: a stored message's sequence, a
// duplicate within the window flagged, and a message the stream refuses
// answered with jetstream's error; published by request or through an
// AckPublisher.
func TestPublishAnswersAsPublishMsg(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 10*time.Second)
	id := uint64(640)
	for name, publish := range publishers(t, env) {
		id++
		t.Run(name, func(t *testing.T) {
			b := &pipeline.Batch{ID: id, Domain: "pay", Priority: pipeline.High, Label: "l", Submitter: "alice",
				Functions: []pipeline.Function{{Type: "noop"}}}
			token := func() *nats.Msg {
				m, err := streams.TokenMsg(streams.TokenSubject(b.Priority, b.Domain), b, 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				return m
			}
			first, err := publish(ctx, token())
			if err != nil || first.Seq == 0 || first.Duplicate {
				t.Fatalf("first publish: %+v, %v", first, err)
			}
			again, err := publish(ctx, token())
			if err != nil || again != (Ack{Seq: first.Seq, Duplicate: true}) {
				t.Fatalf("repeated publish: %+v, %v; want the first's sequence, duplicate", again, err)
			}
			bad := nats.NewMsg(token().Subject)
			bad.Header.Set(jetstream.ExpectedLastSeqHeader, "999")
			var ae *jetstream.APIError
			if _, err := publish(ctx, bad); !errors.As(err, &ae) || ae.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
				t.Fatalf("publish refused by the stream: %v, want jetstream's wrong-last-sequence error", err)
			}
		})
	}
}

// TestPublishWithoutDeadlineIsBounded: a publish the server drops (here
// refused for permissions, which answers nothing) under a context without
// a deadline gives up after the JetStream's default timeout, as jetstream's
// own publish does, instead of waiting for ever.
func TestPublishWithoutDeadlineIsBounded(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	env.ExpectViolation("authz", `Permissions Violation for Publish to "not.for.authz"`)
	js, err := jetstream.New(env.Conn(t, "authz"), jetstream.WithDefaultTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Publish(context.Background(), js, nats.NewMsg("not.for.authz"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("dropped publish: %v, want a deadline exceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a publish nobody answers is still waiting after 5s")
	}
}
