package authz_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

const servedYAML = `
labels:
  jobs:
    domain: pay
    users: ["*"]
    mode: non_atomic
    priority: med
    functions:
      noop: {}
      greet: {}
`

// TestReloadWarnsUnserved: reload warns of a label whose domain no
// processor serves and of each function type no worker serves, says
// nothing once a processor and a worker serve them, and warns again as
// soon as the processor has stopped: its presence goes with it.
func TestReloadWarnsUnserved(t *testing.T) {
	env := testnats.Start(t, []string{domain})
	path := filepath.Join(t.TempDir(), "authz.yaml")
	if err := os.WriteFile(path, []byte(servedYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc, err := authz.New(ctx, env.Conn(t, "authz"), authz.Options{TablePath: path, Owner: "owner"})
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan struct{})
	go func() { defer close(adone); _ = svc.Run(actx) }()
	t.Cleanup(func() { acancel(); testnats.Stopped(t, "authz", adone) })
	b := &bundle{env: env, ctx: ctx}
	reload := func() []string {
		t.Helper()
		var rep api.ReloadReply
		if e := b.call(t, "owner", api.OpReload, nil, &rep); e != nil {
			t.Fatalf("reload: %+v", e)
		}
		if rep.Warnings == nil {
			t.Fatal("reload: no warnings list in the reply")
		}
		return rep.Warnings
	}
	want := func(got []string, prefixes ...string) {
		t.Helper()
		if len(got) != len(prefixes) {
			t.Fatalf("warnings %q, want %d starting %q", got, len(prefixes), prefixes)
		}
		for i, p := range prefixes {
			if !strings.HasPrefix(got[i], p) {
				t.Fatalf("warning %d is %q, want one starting %q (all: %q)", i, got[i], p, got)
			}
		}
	}

	want(reload(),
		"function type greet (labels jobs): no running worker serves it",
		"function type noop (labels jobs): no running worker serves it",
		"label jobs: no running processor serves its domain pay")

	// A worker that serves one of the two types leaves only the other.
	mux := pipeline.NewServeMux()
	ok := func(context.Context, *pipeline.Call) (pipeline.Result, error) { return pipeline.Result{}, nil }
	mux.RegisterFunc("noop", ok)
	stopWorker := run(t, ctx, "worker", func() (interface{ Run(context.Context) error }, error) {
		return worker.New(ctx, env.Conn(t, "worker"), mux, worker.Options{Name: "noop worker"})
	})
	testnats.Eventually(t, 10*time.Second, "the worker's presence", func() bool {
		return !slices.ContainsFunc(reload(), func(w string) bool { return strings.HasPrefix(w, "function type noop") })
	})
	want(reload(),
		"function type greet (labels jobs): no running worker serves it",
		"label jobs: no running processor serves its domain pay")

	mux2 := pipeline.NewServeMux()
	mux2.RegisterFunc("greet", ok)
	run(t, ctx, "worker", func() (interface{ Run(context.Context) error }, error) {
		return worker.New(ctx, env.Conn(t, "worker"), mux2, worker.Options{})
	})
	stopProc := run(t, ctx, "processor", func() (interface{ Run(context.Context) error }, error) {
		return processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: domain, Name: "p.1"})
	})
	testnats.Eventually(t, 10*time.Second, "every presence", func() bool { return len(reload()) == 0 })

	// Stopped cleanly, a process takes its presence with it at once.
	stopProc()
	want(reload(), "label jobs: no running processor serves its domain pay")
	stopWorker()
	want(reload(),
		"function type noop (labels jobs): no running worker serves it",
		"label jobs: no running processor serves its domain pay")
}

// run starts what build returns and returns a func that stops it and waits
// for its Run to return; the test's cleanup stops it too.
func run(t *testing.T, ctx context.Context, what string, build func() (interface{ Run(context.Context) error }, error)) func() {
	t.Helper()
	r, err := build()
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	stop := func() { cancel(); testnats.Stopped(t, what, done) }
	t.Cleanup(stop)
	return stop
}
