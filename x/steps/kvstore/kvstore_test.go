package kvstore_test

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/x/steps"
	"github.com/tickflow/tickflow/x/steps/kvstore"
	"github.com/tickflow/tickflow/x/steps/storetest"
)

// runsEnv is a server with every resource provisioned, no domains needed.
func runsEnv(t *testing.T) *testnats.Env {
	t.Helper()
	env := testnats.Start(t, nil)
	ctx := testnats.Context(t, 10*time.Second)
	if err := streams.Provision(ctx, env.JS(t, "admin"), env.Settings); err != nil {
		t.Fatal(err)
	}
	return env
}

// newRunStore connects as the worker, the identity that uses the store.
func newRunStore(t *testing.T, env *testnats.Env) *kvstore.Store {
	t.Helper()
	s, err := kvstore.New(t.Context(), env.JS(t, "worker"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestRunStore(t *testing.T) {
	env := runsEnv(t)
	admin := env.JS(t, "admin")
	storetest.TestRunStore(t, func(t *testing.T) steps.RunStore {
		// Every subtest starts from an empty bucket.
		s, err := admin.Stream(t.Context(), "KV_"+streams.BucketRuns)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Purge(t.Context()); err != nil {
			t.Fatal(err)
		}
		return newRunStore(t, env)
	})
}

func TestRunStoreKeys(t *testing.T) {
	env := runsEnv(t)
	s := newRunStore(t, env)
	ctx := t.Context()
	long := strings.Repeat("subject/", 40) // 320 bytes: hashed
	rec := &steps.RunRecord{RunID: "run.1", Processor: "p_x", SubjectID: "uw.1*"}
	if err := s.SaveRun(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveRun(ctx, &steps.RunRecord{RunID: "run-2", Processor: "p_x", SubjectID: long}); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStepOutput(ctx, "run.1", steps.StepProcessing, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}

	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketRuns)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b64 := func(s string) string { return "b" + base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, want := range []string{
		"latest." + b64("p_x") + "." + b64("uw.1*"),
		"out." + b64("run.1") + "." + b64("processing"),
	} {
		if !slices.Contains(keys, want) {
			t.Errorf("keys %q lack %q", keys, want)
		}
	}
	if len(keys) != 3 {
		t.Fatalf("keys = %q, want 3", keys)
	}
	for _, k := range keys {
		if len(k) > 200 {
			t.Errorf("key %q is %d bytes long; long ids must be hashed", k, len(k))
		}
	}
	if got, err := s.LatestRun(ctx, "p_x", long); err != nil || got.RunID != "run-2" {
		t.Fatalf("LatestRun(long subject) = %+v, %v", got, err)
	}
	// A long id differing only at its end has a key of its own.
	if _, err := s.LatestRun(ctx, "p_x", long[:len(long)-1]+"X"); !errors.Is(err, steps.ErrNotFound) {
		t.Fatalf("LatestRun(another long subject): err = %v, want ErrNotFound", err)
	}
}

func TestRunStoreRejectsEmptyIDs(t *testing.T) {
	env := runsEnv(t)
	s := newRunStore(t, env)
	ctx := t.Context()
	tests := []struct {
		name string
		call func() error
	}{
		{"LatestRun without processor", func() error { _, err := s.LatestRun(ctx, "", "UW-1"); return err }},
		{"LatestRun without subject", func() error { _, err := s.LatestRun(ctx, "p_x", ""); return err }},
		{"SaveRun without subject", func() error { return s.SaveRun(ctx, &steps.RunRecord{RunID: "r", Processor: "p_x"}) }},
		{"SaveStepOutput without run", func() error { return s.SaveStepOutput(ctx, "", steps.StepProcessing, []byte(`1`)) }},
		{"StepOutput without step", func() error { _, err := s.StepOutput(ctx, "run-1", ""); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !errors.Is(err, jetstream.ErrInvalidKey) {
				t.Fatalf("err = %v, want ErrInvalidKey", err)
			}
		})
	}
	if err := s.SaveRun(ctx, nil); err == nil {
		t.Fatal("SaveRun(nil): want an error")
	}
}

func TestRunStoreHonoursContext(t *testing.T) {
	env := runsEnv(t)
	s := newRunStore(t, env)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.SaveStepOutput(ctx, "run-1", steps.StepProcessing, []byte(`1`)); !errors.Is(err, context.Canceled) {
		t.Fatalf("SaveStepOutput with a canceled context: err = %v, want context.Canceled", err)
	}
	if _, err := s.LatestRun(ctx, "p_x", "UW-1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("LatestRun with a canceled context: err = %v, want context.Canceled", err)
	}
}

func TestNewRunStoreNeedsTheBucket(t *testing.T) {
	env := testnats.Start(t, nil) // nothing provisioned
	_, err := kvstore.New(testnats.Context(t, 5*time.Second), env.JS(t, "admin"))
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("NewRunStore without the bucket: err = %v, want ErrBucketNotFound", err)
	}
}
