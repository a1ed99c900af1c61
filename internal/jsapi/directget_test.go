package jsapi_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestKVGetPipelined reads KV keys with pipelined direct gets against a
// real server: a value at its revision, a key never written, a deleted
// key, and a bucket that does not exist, each sent before any is read.
func TestKVGetPipelined(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	ctx := testnats.Context(t, 20*time.Second)
	nc := env.Conn(t, "admin")
	pub, err := jsapi.NewAckPublisher(nc, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(ctx, "a", []byte("value of a"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "gone", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	gets := map[string]*jsapi.PendingAck{}
	for _, key := range []string{"a", "never", "gone"} {
		if gets[key], err = pub.Request(jsapi.KVGetMsg(streams.BucketResults, key)); err != nil {
			t.Fatal(err)
		}
	}
	nobucket, err := pub.Request(jsapi.KVGetMsg("nosuchbucket", "a"))
	if err != nil {
		t.Fatal(err)
	}
	for key, g := range gets {
		if _, err := g.Wait(ctx); err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
	}
	if v, r, err := jsapi.ReadKVGet(gets["a"].Msg()); err != nil || string(v) != "value of a" || r != rev {
		t.Fatalf("get a: %q at %d (%v), want %q at %d", v, r, err, "value of a", rev)
	}
	for _, key := range []string{"never", "gone"} {
		if _, _, err := jsapi.ReadKVGet(gets[key].Msg()); !errors.Is(err, jsapi.ErrNoValue) {
			t.Fatalf("get %s: %v, want ErrNoValue", key, err)
		}
	}
	if _, err := nobucket.Wait(ctx); err != nil {
		t.Fatalf("get from a missing bucket: %v", err)
	}
	if _, _, err := jsapi.ReadKVGet(nobucket.Msg()); err == nil || errors.Is(err, jsapi.ErrNoValue) {
		t.Fatalf("get from a missing bucket: %v, want an error other than ErrNoValue", err)
	}
}
