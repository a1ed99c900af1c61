package worker_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// includer dispatches, polls and counts its hooks.
type includer struct {
	success, failure atomic.Int32
	sender, secret   atomic.Value
}

func (h *includer) Handle(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	h.sender.Store(call.Sender)
	if call.SenderSecret != nil {
		s, err := call.SenderSecret()
		if err != nil {
			return pipeline.Result{}, err
		}
		h.secret.Store(string(s))
	}
	return pipeline.Result{Ref: "tx-1"}, nil
}

func (h *includer) Poll(_ context.Context, _ *pipeline.Call, ref string) (bool, error) {
	switch ref {
	case "tx-1":
		return true, nil
	case "tx-bad":
		return false, errors.New("reverted")
	}
	return false, nil
}

func (h *includer) OnSuccess(context.Context, *pipeline.Call, pipeline.Result) error {
	h.success.Add(1)
	return errors.New("a hook's error changes nothing")
}

func (h *includer) OnFailure(context.Context, *pipeline.Call, pipeline.Failure) error {
	h.failure.Add(1)
	return nil
}

func TestPollHooksAndSender(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	h := &includer{}
	mux := pipeline.NewServeMux()
	mux.Register("chain.tx", h)
	mux.RegisterFunc("plain", func(context.Context, *pipeline.Call) (pipeline.Result, error) { return pipeline.Result{}, nil })
	t.Setenv("TEST_WORKER_SENDER", "s3cret")
	serve(t, env, mux, worker.Options{Senders: map[string]map[string]string{"pay": {"s1": "env:TEST_WORKER_SENDER"}}})
	nc := env.Conn(t, "processor")

	req := fnReq(1, "chain.tx", 0)
	req.Sender = "s1"
	rep := call(t, nc, streams.WorkSubject("chain.tx"), req, 2*time.Second)
	if rep.Error != nil || len(rep.Outputs) != 1 || rep.Outputs[0].Ref != "tx-1" {
		t.Fatalf("dispatch: %+v", rep)
	}
	if h.sender.Load() != "s1" || h.secret.Load() != "s3cret" {
		t.Fatalf("sender %v, secret resolved %v", h.sender.Load(), h.secret.Load() != nil)
	}

	poll := func(typ, ref string) *records.WorkReply {
		r := fnReq(1, typ, 0)
		r.Inclusion = &records.InclusionCall{Ref: ref}
		r.Retry = &pipeline.RetryLogic{Times: 1}
		return call(t, nc, streams.PollSubject(typ), r, 2*time.Second)
	}
	if r := poll("chain.tx", "tx-1"); !r.Included || r.Error != nil {
		t.Fatalf("poll included: %+v", r)
	}
	if r := poll("chain.tx", "tx-2"); r.Included || r.Error != nil {
		t.Fatalf("poll pending: %+v", r)
	}
	if r := poll("chain.tx", "tx-bad"); r.Error == nil || !r.Error.Retryable || !strings.Contains(r.Error.Message, "reverted") {
		t.Fatalf("poll failed: %+v", r)
	}
	if r := poll("plain", "tx-1"); r.Error == nil || !r.Error.NoHook {
		t.Fatalf("poll of a handler without Poll: %+v", r)
	}

	hook := func(kind string) *records.WorkReply {
		r := fnReq(1, "chain.tx", 0)
		r.Inclusion = &records.InclusionCall{Hook: kind, Output: &pipeline.Output{Ref: "tx-1"}}
		r.Failure = &pipeline.Failure{BatchID: 1, Failures: 3, Exhausted: true}
		return call(t, nc, streams.HookSubject("chain.tx"), r, 2*time.Second)
	}
	for range 3 {
		if r := hook(records.HookSuccess); r.Error != nil {
			t.Fatalf("success hook: %+v", r)
		}
		if r := hook(records.HookFailure); r.Error != nil {
			t.Fatalf("failure hook: %+v", r)
		}
	}
	if s, f := h.success.Load(), h.failure.Load(); s != 1 || f != 1 {
		t.Fatalf("hooks ran %d and %d times, want once each", s, f)
	}
}

func TestResolveSecret(t *testing.T) {
	t.Setenv("TEST_RESOLVE_SECRET", "from-env")
	path := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(path, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ ref, want, err string }{
		{ref: "env:TEST_RESOLVE_SECRET", want: "from-env"},
		{ref: "file:" + path, want: "from-file"},
		{ref: "env:TEST_RESOLVE_SECRET_UNSET", err: "is not set"},
		{ref: "file:" + path + ".missing", err: "read"},
		{ref: "vault:x", err: "expected env:NAME or file:/path"},
		{ref: "env:", err: "expected env:NAME or file:/path"},
	} {
		got, err := worker.ResolveSecret(tt.ref)
		switch {
		case tt.err == "" && (err != nil || string(got) != tt.want):
			t.Errorf("%s: %q, %v; want %q", tt.ref, got, err, tt.want)
		case tt.err != "" && (!errors.Is(err, worker.ErrSecretRef) || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%s: %v, want ErrSecretRef saying %q", tt.ref, err, tt.err)
		case err != nil && (strings.Contains(err.Error(), "from-env") || strings.Contains(err.Error(), "from-file")):
			t.Errorf("%s: the error shows the secret: %v", tt.ref, err)
		}
	}
}
