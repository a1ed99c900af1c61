package submit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// TestReadAck: the server's acknowledgement templates read without
// reflection, any other success as jetstream reads it, and an error answer
// or garbage as no acknowledgement.
func TestReadAck(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Ack
		ok         bool
	}{
		{"template", `{"stream":"KV_batches","seq":42}`, Ack{Seq: 42}, true},
		{"duplicate", `{"stream":"HIGH","seq":7,"duplicate": true}`, Ack{Seq: 7, Duplicate: true}, true},
		{"domain", `{"stream":"HIGH","domain":"hub","seq":9}`, Ack{Seq: 9}, true},
		{"batch", `{"stream":"HIGH","seq":9,"batch":"b","count":2}`, Ack{Seq: 9}, true},
		{"error", `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_batches","seq":0}`, Ack{}, false},
		{"no stream", `{"stream":"","seq":3}`, Ack{}, false},
		{"garbage", `{"stream":"HIGH","seq":`, Ack{}, false},
		{"overflow", `{"stream":"HIGH","seq":99999999999999999999999}`, Ack{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := readAck([]byte(tc.body))
			if got != tc.want || ok != tc.ok {
				t.Fatalf("readAck(%s) = %+v, %v; want %+v, %v", tc.body, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestCreateKeyAnswersAsKVCreate: a created key returns its revision, an
// existing one ErrKeyExists, and a deleted one is created on its delete
// marker, as kv.Create does.
func TestCreateKeyAnswersAsKVCreate(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 10*time.Second)
	js := env.JS(t, "authz")
	kv, err := js.KeyValue(ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := CreateKey(ctx, js, kv, "k1", []byte("a"))
	if err != nil || rev == 0 {
		t.Fatalf("first create: rev %d, err %v", rev, err)
	}
	if e, err := kv.Get(ctx, "k1"); err != nil || string(e.Value()) != "a" || e.Revision() != rev {
		t.Fatalf("stored: %v, %v", e, err)
	}
	if _, err := CreateKey(ctx, js, kv, "k1", []byte("b")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("second create: %v, want ErrKeyExists", err)
	}
	if err := kv.Delete(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	if rev2, err := CreateKey(ctx, js, kv, "k1", []byte("c")); err != nil || rev2 <= rev {
		t.Fatalf("create after delete: rev %d, err %v", rev2, err)
	}
}

// TestPublishAnswersAsPublishMsg: a stored message's sequence, a
// duplicate within the window flagged, and a message the stream refuses
// answered with jetstream's error.
func TestPublishAnswersAsPublishMsg(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 10*time.Second)
	js := env.JS(t, "authz")
	b := &pipeline.Batch{ID: 640, Domain: "pay", Priority: pipeline.High, Label: "l", Submitter: "alice",
		Functions: []pipeline.Function{{Type: "noop"}}}
	m, err := streams.TokenMsg(streams.TokenSubject(b.Priority, b.Domain), b, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	first, err := Publish(ctx, js, m)
	if err != nil || first.Seq == 0 || first.Duplicate {
		t.Fatalf("first publish: %+v, %v", first, err)
	}
	again, err := Publish(ctx, js, m)
	if err != nil || again != (Ack{Seq: first.Seq, Duplicate: true}) {
		t.Fatalf("repeated publish: %+v, %v; want the first's sequence, duplicate", again, err)
	}
	bad := nats.NewMsg(m.Subject)
	bad.Header.Set(jetstream.ExpectedLastSeqHeader, "999")
	var ae *jetstream.APIError
	if _, err := Publish(ctx, js, bad); !errors.As(err, &ae) || ae.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("publish refused by the stream: %v, want jetstream's wrong-last-sequence error", err)
	}
}

func BenchmarkReadAck(b *testing.B) {
	ack := []byte(`{"stream":"KV_batches","seq":123456}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := readAck(ack); !ok {
			b.Fatal("not read")
		}
	}
}

func BenchmarkReadAckJSON(b *testing.B) {
	ack := []byte(`{"stream":"KV_batches","seq":123456}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := readAckJSON(ack); !ok {
			b.Fatal("not read")
		}
	}
}

// TestPublishWithoutDeadlineIsBounded: a publish the server drops (here
// refused for permissions, which answers nothing) under a context without
// a deadline gives up after the JetStream's default timeout, as jetstream's
// own publish does, instead of waiting for ever.
func TestPublishWithoutDeadlineIsBounded(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
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
