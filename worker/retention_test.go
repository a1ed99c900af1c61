package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// TestCompletionRecordExpires: a completion record carries the time to
// live provisioned on the results bucket (RecordTTL), whether written by a
// call of one function under its own key or by a unit in its unit group,
// and the server removes it when it runs out, rather than at the bucket's
// age of an hour or more.
func TestCompletionRecordExpires(t *testing.T) {
	env := testnats.Start(t, []string{"pay"}, testnats.WithSettings(func(s *streams.Settings) {
		s.FinishedMaxAge, s.AckWait, s.DuplicateWindow = time.Second, time.Second, time.Second
	}))
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("effect", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload("done")}, nil
	})
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	if r := call(t, nc, streams.WorkSubject("effect"), fnReq(1, "effect", 0), time.Second); r.Error != nil {
		t.Fatalf("call: %+v", r.Error)
	}
	units := callUnits(t, nc, []records.WorkRequest{unitReq(2, "effect")}, time.Second)
	if units[0].Error != nil {
		t.Fatalf("unit: %+v", units[0].Error)
	}

	ctx := testnats.Context(t, 30*time.Second)
	admin := env.JS(t, "admin")
	st, err := admin.Stream(ctx, "KV_"+streams.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := admin.KeyValue(ctx, streams.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{streams.ResultKey(1, 0, 0), streams.UnitGroupKey(2)}
	for _, key := range keys {
		m, err := st.GetLastMsgForSubject(ctx, "$KV."+streams.BucketResults+"."+key)
		if err != nil {
			t.Fatalf("record %s: %v", key, err)
		}
		if got := m.Header.Get(jetstream.MsgTTLHeader); got != "2s" {
			t.Fatalf("record %s: time to live %q, want 2s (finished age 1s, below ack wait + duplicate window)", key, got)
		}
	}
	for _, key := range keys {
		testnats.Eventually(t, 15*time.Second, "record "+key+" expired", func() bool {
			_, err := kv.Get(ctx, key)
			return errors.Is(err, jetstream.ErrKeyNotFound)
		})
	}
}
