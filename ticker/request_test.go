package ticker

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/processor"
)

// respond answers every tick to domain, as admin, with what answer returns
// for the tick's body; nil means stay silent.
func (b *bundle) respond(t *testing.T, domain string, answer func(body []byte) []byte) {
	t.Helper()
	sub, err := b.admin.Subscribe("tick."+domain, func(m *nats.Msg) {
		if a := answer(m.Data); a != nil {
			_ = m.Respond(a)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.admin.Flush(); err != nil {
		t.Fatal(err)
	}
}

func TestRequestDecodesTheReport(t *testing.T) {
	b := setup(t)
	// The fake processor runs as many steps as the tick asks for.
	b.respond(t, "pay", func(body []byte) []byte {
		n, err := processor.ParseTick(body)
		if err != nil {
			t.Errorf("fake processor: %v", err)
			return nil
		}
		rep := api.TickReport{Domain: "pay", Status: api.TickOK}
		for i := range n {
			rep.Steps = append(rep.Steps, api.StepReport{BatchID: uint64(i + 1), Priority: "high", Action: "executed", Outcome: "Executed"})
		}
		out, _ := json.Marshal(rep)
		return out
	})
	for _, steps := range []int{0, 1, 3} {
		// Sent as the ticker user: its replies arrive on _INBOX_ticker.>.
		rep, err := Request(testnats.Context(t, 5*time.Second), b.ticker, "pay", steps)
		if err != nil {
			t.Fatalf("Request(steps %d) = %v", steps, err)
		}
		want := api.TickReport{Domain: "pay", Status: api.TickOK}
		for i := range max(steps, 1) {
			want.Steps = append(want.Steps, api.StepReport{BatchID: uint64(i + 1), Priority: "high", Action: "executed", Outcome: "Executed"})
		}
		if !reflect.DeepEqual(rep, want) {
			t.Errorf("Request(steps %d) = %+v, want %+v", steps, rep, want)
		}
	}
}

func TestRequestErrors(t *testing.T) {
	b := setup(t)
	b.respond(t, "quiet", func([]byte) []byte { return nil })
	b.respond(t, "garbled", func([]byte) []byte { return []byte("not json") })
	b.respond(t, "rejects", func([]byte) []byte { return []byte(`{"error":"tick body is bad"}`) })
	// A processor that is stopping answers as processor.Run does then.
	stopping, err := b.admin.Subscribe("tick.stopping", func(m *nats.Msg) {
		_ = streams.Reply(b.admin, m.Reply, []byte(`{"error":"processor: shutting down"}`), streams.CodeStopping, "processor: shutting down")
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stopping.Unsubscribe() })
	if err := b.admin.Flush(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		domain  string
		timeout time.Duration
		is      []error
		says    *regexp.Regexp
	}{
		{
			name: "no processor subscribed", domain: "idle", timeout: 5 * time.Second,
			is:   []error{ErrNoAnswer, nats.ErrNoResponders},
			says: regexp.MustCompile(`^ticker: no processor answered for domain idle: nothing is subscribed to tick\.idle`),
		},
		{
			name: "processor silent", domain: "quiet", timeout: 200 * time.Millisecond,
			is:   []error{ErrNoAnswer, context.DeadlineExceeded},
			says: regexp.MustCompile(`^ticker: no processor answered for domain quiet within (19\d|200)ms: `),
		},
		{
			name: "answer not a report", domain: "garbled", timeout: 5 * time.Second,
			is:   []error{ErrBadReport},
			says: regexp.MustCompile(`expected a JSON processor report, got "not json"`),
		},
		{
			name: "processor stopping", domain: "stopping", timeout: 5 * time.Second,
			is:   []error{ErrStopping},
			says: regexp.MustCompile(`^ticker: the processor is stopping for domain stopping: processor: shutting down$`),
		},
		{
			name: "processor rejected the tick", domain: "rejects", timeout: 5 * time.Second,
			is:   []error{ErrBadReport},
			says: regexp.MustCompile(`the processor rejected the tick: tick body is bad`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), tt.timeout)
			defer cancel()
			_, err := Request(ctx, b.ticker, tt.domain, 0)
			if err == nil {
				t.Fatal("Request = nil error")
			}
			for _, target := range tt.is {
				if !errors.Is(err, target) {
					t.Errorf("error %q does not match %v", err, target)
				}
			}
			if !tt.says.MatchString(err.Error()) {
				t.Errorf("error %q does not match %s", err, tt.says)
			}
		})
	}
}

// Against the real processor: the wire contract (tick body in, JSON
// report out) holds end to end.
func TestRequestRealProcessor(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor Run = %v", err)
		}
	}()

	nc := env.Conn(t, "ticker")
	var rep api.TickReport
	testnats.Eventually(t, 5*time.Second, "the processor to answer a tick", func() bool {
		rep, err = Request(testnats.Context(t, time.Second), nc, "pay", 2)
		return !errors.Is(err, nats.ErrNoResponders)
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Domain != "pay" || rep.Status != api.TickNoMessages {
		t.Fatalf("report = %+v, want domain pay with status %q", rep, api.TickNoMessages)
	}
}

func TestValidation(t *testing.T) {
	env := testnats.Start(t, nil)
	nc := env.Conn(t, "ticker")
	tests := []struct {
		name string
		nc   *nats.Conn
		opts Options
		says string // "" means valid
	}{
		{name: "valid every", nc: nc, opts: Options{Domains: []string{"pay"}, Every: time.Second}},
		{name: "valid schedule", nc: nc, opts: Options{Domains: []string{"pay", "refund"}, Schedule: every20ms{}}},
		{name: "valid once", nc: nc, opts: Options{Domains: []string{"pay"}, Once: true, Steps: 4}},
		{name: "no connection", opts: Options{Domains: []string{"pay"}, Once: true}, says: "the NATS connection is nil"},
		{name: "no domain", nc: nc, opts: Options{Once: true}, says: "Domains: at least one domain is required"},
		{name: "bad domain", nc: nc, opts: Options{Domains: []string{"pay", "a.b"}, Once: true}, says: `Domains[1]: pipeline: invalid domain: "a.b" must not contain '.'`},
		{name: "empty domain", nc: nc, opts: Options{Domains: []string{""}, Once: true}, says: "Domains[0]: pipeline: invalid domain: must not be empty"},
		{name: "repeated domain", nc: nc, opts: Options{Domains: []string{"pay", "pay"}, Once: true}, says: `Domains[1]: "pay" repeats Domains[0]`},
		{name: "no schedule", nc: nc, opts: Options{Domains: []string{"pay"}}, says: "set exactly one of Every, Schedule or Once (got none)"},
		{name: "every and schedule", nc: nc, opts: Options{Domains: []string{"pay"}, Every: time.Second, Schedule: every20ms{}}, says: "(got Every and Schedule)"},
		{name: "schedule and once", nc: nc, opts: Options{Domains: []string{"pay"}, Schedule: every20ms{}, Once: true}, says: "(got Schedule and Once)"},
		{name: "all three", nc: nc, opts: Options{Domains: []string{"pay"}, Every: time.Second, Schedule: every20ms{}, Once: true}, says: "(got Every and Schedule and Once)"},
		{name: "negative every", nc: nc, opts: Options{Domains: []string{"pay"}, Every: -time.Second}, says: "Every: must be a positive interval (got -1s)"},
		{name: "negative steps", nc: nc, opts: Options{Domains: []string{"pay"}, Once: true, Steps: -1}, says: "Steps: must be ≥ 1, or 0 for the default 256 (got -1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tk, err := New(tt.nc, tt.opts)
			if tt.says == "" {
				if err != nil || tk == nil {
					t.Fatalf("New = %v, %v; want a Ticker", tk, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("New = %v, want an error matching ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.says) {
				t.Errorf("error %q does not say %q", err, tt.says)
			}
		})
	}

	// Every problem is reported at once.
	_, err := New(nc, Options{Domains: []string{"a.b"}, Steps: -2})
	for _, want := range []string{"Domains[0]", "got none", "Steps"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}

	// The single-tick functions check their arguments the same way.
	ctx := testnats.Context(t, 5*time.Second)
	if err := TickOnce(ctx, nc, "a.b", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("TickOnce(a.b) = %v, want ErrInvalid", err)
	}
	if _, err := Request(ctx, nc, "pay", -1); !errors.Is(err, ErrInvalid) {
		t.Errorf("Request(steps -1) = %v, want ErrInvalid", err)
	}
	if err := TickOnce(ctx, nil, "pay", 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("TickOnce(nil conn) = %v, want ErrInvalid", err)
	}
}
