package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tickflow/tickflow/pipeline"
)

// echo answers with its own name, so a test sees which handler ran.
func echo(name string) pipeline.HandlerFunc {
	return func(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload(name + ":" + call.Type)}, nil
	}
}

func resultString(t *testing.T, r pipeline.Result) string {
	t.Helper()
	var s string
	if err := r.Data.Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestServeMuxDispatch(t *testing.T) {
	failing := errors.New("insufficient funds")
	mux := pipeline.NewServeMux()
	mux.Register("ledger.transfer", echo("transfer"))
	mux.RegisterFunc("notify", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, failing
	})
	mux.Register("report", echo("report"))

	tests := []struct {
		name      string
		typ       string
		want      string
		wantErr   error
		permanent bool
	}{
		{name: "dotted type", typ: "ledger.transfer", want: "transfer:ledger.transfer"},
		{name: "another type", typ: "report", want: "report:report"},
		{name: "handler error passes through unchanged", typ: "notify", wantErr: failing},
		{name: "unknown type fails permanently", typ: "ledger.refund", wantErr: pipeline.ErrNoHandler, permanent: true},
		{name: "types are case sensitive", typ: "Report", wantErr: pipeline.ErrNoHandler, permanent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := mux.Handle(context.Background(), &pipeline.Call{Type: tt.typ})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Handle(%q) error = %v, want %v", tt.typ, err, tt.wantErr)
				}
				if got := pipeline.IsPermanent(err); got != tt.permanent {
					t.Fatalf("IsPermanent(%v) = %v, want %v", err, got, tt.permanent)
				}
				if tt.permanent && !strings.Contains(err.Error(), fmt.Sprintf("%q", tt.typ)) {
					t.Errorf("error %q does not name the type %q", err, tt.typ)
				}
				return
			}
			if err != nil {
				t.Fatalf("Handle(%q): %v", tt.typ, err)
			}
			if got := resultString(t, res); got != tt.want {
				t.Fatalf("Handle(%q) = %q, want %q", tt.typ, got, tt.want)
			}
		})
	}
	// A ServeMux is itself a Handler.
	var _ pipeline.Handler = mux
}

func TestServeMuxMiddlewareOrder(t *testing.T) {
	var (
		mu    sync.Mutex
		trace []string
	)
	record := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		trace = append(trace, s)
	}
	named := func(name string) pipeline.Middleware {
		return func(next pipeline.Handler) pipeline.Handler {
			return pipeline.HandlerFunc(func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
				record(name + " before")
				res, err := next.Handle(ctx, call)
				record(name + " after")
				return res, err
			})
		}
	}
	mux := pipeline.NewServeMux()
	mux.Use(named("outer"), named("middle"))
	mux.RegisterFunc("work", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		record("handler")
		return pipeline.Result{}, nil
	})
	// Middleware added after registration applies too, innermost.
	mux.Use(named("inner"))

	if _, err := mux.Handle(context.Background(), &pipeline.Call{Type: "work"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"outer before", "middle before", "inner before", "handler", "inner after", "middle after", "outer after"}
	if !slices.Equal(trace, want) {
		t.Fatalf("call order\n got %q\nwant %q", trace, want)
	}

	trace = nil
	raw, ok := mux.Raw("work")
	if !ok {
		t.Fatal("Raw(work) not found")
	}
	if _, err := raw.Handle(context.Background(), &pipeline.Call{Type: "work"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(trace, []string{"handler"}) {
		t.Fatalf("Raw handler ran middleware: %q", trace)
	}

	trace = nil
	if _, err := mux.Handle(context.Background(), &pipeline.Call{Type: "missing"}); !errors.Is(err, pipeline.ErrNoHandler) {
		t.Fatalf("Handle(missing) = %v, want ErrNoHandler", err)
	}
	if len(trace) != 0 {
		t.Fatalf("middleware ran for an unknown type: %q", trace)
	}
}

func TestServeMuxRegisterPanics(t *testing.T) {
	tests := []struct {
		name     string
		register func(m *pipeline.ServeMux)
		want     string
	}{
		{name: "duplicate registration", want: `"work" registered twice`,
			register: func(m *pipeline.ServeMux) { m.Register("work", echo("again")) }},
		{name: "duplicate through RegisterFunc", want: "registered twice",
			register: func(m *pipeline.ServeMux) { m.RegisterFunc("work", echo("again")) }},
		{name: "empty type", want: "must not be empty",
			register: func(m *pipeline.ServeMux) { m.Register("", echo("x")) }},
		{name: "wildcard type", want: "may hold only",
			register: func(m *pipeline.ServeMux) { m.Register("work.*", echo("x")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mux := pipeline.NewServeMux()
			mux.Register("work", echo("first"))
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("no panic")
				}
				if msg := fmt.Sprint(r); !strings.Contains(msg, tt.want) {
					t.Fatalf("panic %q, want it to contain %q", msg, tt.want)
				}
				// The first registration is untouched.
				res, err := mux.Handle(context.Background(), &pipeline.Call{Type: "work"})
				if err != nil || resultString(t, res) != "first:work" {
					t.Fatalf("after the panic Handle(work) = %v, %v", res, err)
				}
			}()
			tt.register(mux)
		})
	}
}

func TestServeMuxTypesSorted(t *testing.T) {
	mux := pipeline.NewServeMux()
	if got := mux.Types(); len(got) != 0 {
		t.Fatalf("empty mux Types() = %q", got)
	}
	for _, typ := range []string{"zeta", "alpha.two", "Beta", "alpha", "alpha.one"} {
		mux.Register(typ, echo(typ))
	}
	want := []string{"Beta", "alpha", "alpha.one", "alpha.two", "zeta"}
	if got := mux.Types(); !slices.Equal(got, want) {
		t.Fatalf("Types() = %q, want %q", got, want)
	}
	// The result is a copy: changing it changes nothing.
	got := mux.Types()
	got[0] = "mutated"
	if again := mux.Types(); !slices.Equal(again, want) {
		t.Fatalf("Types() after mutating a result = %q", again)
	}
}

func TestServeMuxFallbacks(t *testing.T) {
	mux := pipeline.NewServeMux()
	mux.Register("work", echo("work"))
	var got pipeline.Failure
	mux.RegisterFallback("work", pipeline.FallbackFunc(func(_ context.Context, _ *pipeline.Call, f pipeline.Failure) (pipeline.Result, error) {
		got = f
		return pipeline.Result{Data: pipeline.MustPayload("fallback")}, nil
	}))
	if _, ok := mux.FallbackFor("other"); ok {
		t.Fatal("FallbackFor(other) found a fallback")
	}
	fb, ok := mux.FallbackFor("work")
	if !ok {
		t.Fatal("FallbackFor(work) found none")
	}
	want := pipeline.Failure{BatchID: 9, Index: 1, Failures: 4, LastError: "timeout", Exhausted: true}
	res, err := fb.Fallback(context.Background(), &pipeline.Call{Type: "work"}, want)
	if err != nil || resultString(t, res) != "fallback" {
		t.Fatalf("Fallback = %v, %v", res, err)
	}
	if got != want {
		t.Fatalf("fallback received %+v, want %+v", got, want)
	}
}

// TestServeMuxConcurrentUse registers, adds middleware and serves at once;
// run with -race it proves the mux's locking.
func TestServeMuxConcurrentUse(t *testing.T) {
	mux := pipeline.NewServeMux()
	mux.Register("seed", echo("seed"))
	pass := func(next pipeline.Handler) pipeline.Handler { return next }
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			typ := fmt.Sprintf("type%d", i)
			mux.Register(typ, echo(typ))
			mux.RegisterFallback(typ, pipeline.FallbackFunc(func(context.Context, *pipeline.Call, pipeline.Failure) (pipeline.Result, error) {
				return pipeline.Result{}, nil
			}))
			mux.Use(pass)
			for range 50 {
				if _, err := mux.Handle(context.Background(), &pipeline.Call{Type: "seed"}); err != nil {
					t.Errorf("Handle(seed): %v", err)
					return
				}
				_ = mux.Types()
				_, _ = mux.FallbackFor(typ)
			}
		})
	}
	wg.Wait()
	if n := len(mux.Types()); n != 9 {
		t.Fatalf("%d types registered, want 9", n)
	}
}

func TestCallIdempotencyKey(t *testing.T) {
	tests := []struct {
		name string
		call pipeline.Call
		want string
	}{
		{name: "first function", call: pipeline.Call{BatchID: 42, Index: 0, Attempt: 1}, want: "42/0"},
		{name: "same key on every attempt", call: pipeline.Call{BatchID: 42, Index: 0, Attempt: 7}, want: "42/0"},
		{name: "largest id", call: pipeline.Call{BatchID: 1<<64 - 1, Index: 999}, want: "18446744073709551615/999"},
		{name: "a new round is a new effect", call: pipeline.Call{BatchID: 42, Index: 3, Attempt: 4, Round: 1}, want: "42/3/1"},
		{name: "same key on every attempt of a round", call: pipeline.Call{BatchID: 42, Index: 3, Attempt: 9, Round: 2}, want: "42/3/2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.call.IdempotencyKey(); got != tt.want {
				t.Fatalf("IdempotencyKey() = %q, want %q", got, tt.want)
			}
		})
	}
}
