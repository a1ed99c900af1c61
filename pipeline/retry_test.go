package pipeline_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

func sec(n float64) pipeline.Duration { return pipeline.Duration(n * float64(time.Second)) }

func fixed(initial pipeline.Duration) pipeline.Backoff {
	return pipeline.Backoff{Kind: pipeline.Fixed, Initial: initial}
}

func TestRetryLogicValidateAccepts(t *testing.T) {
	tests := []struct {
		name  string
		logic pipeline.RetryLogic
	}{
		{name: "NoRetry", logic: pipeline.NoRetry},
		{name: "forever", logic: pipeline.RetryLogic{Times: pipeline.Forever, Backoff: fixed(sec(1))}},
		{name: "zero retries", logic: pipeline.RetryLogic{Times: 0, Backoff: fixed(sec(1))}},
		{name: "max equal to initial", logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: sec(2), Max: sec(2)}}},
		{name: "zero max means no cap", logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(1), Multiplier: 1.5}}},
		{name: "linear with zero increment", logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: sec(1)}}},
		{name: "jitter and codes", logic: pipeline.RetryLogic{Times: 1, Backoff: fixed(sec(1)), Jitter: sec(0.5), NonRetryable: []string{"bad"}, RetryOn: []string{"timeout"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.logic.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestRetryLogicValidateRejects(t *testing.T) {
	exp := func(m float64) pipeline.RetryLogic {
		return pipeline.RetryLogic{Times: 3, Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(1), Multiplier: m}}
	}
	tests := []struct {
		name  string
		logic pipeline.RetryLogic
		field string
		rule  string
	}{
		{name: "times below forever", field: "times", rule: "got -2",
			logic: pipeline.RetryLogic{Times: -2, Backoff: fixed(sec(1))}},
		{name: "zero initial", field: "backoff.initial", rule: "positive duration (got 0s)",
			logic: pipeline.RetryLogic{Times: 1, Backoff: fixed(0)}},
		{name: "negative initial", field: "backoff.initial", rule: "got -1s",
			logic: pipeline.RetryLogic{Times: 1, Backoff: fixed(sec(-1))}},
		{name: "negative max", field: "backoff.max", rule: "must not be negative",
			logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: sec(1), Max: sec(-1)}}},
		{name: "max below initial", field: "backoff.max", rule: "must be ≥ backoff.initial 2s",
			logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: sec(2), Max: sec(1)}}},
		{name: "negative increment", field: "backoff.increment", rule: "got -1s",
			logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: sec(1), Increment: sec(-1)}}},
		{name: "multiplier exactly 1", field: "backoff.multiplier", rule: "must be > 1 for exponential backoff (got 1)", logic: exp(1)},
		{name: "multiplier below 1", field: "backoff.multiplier", rule: "got 0.5", logic: exp(0.5)},
		{name: "multiplier unset", field: "backoff.multiplier", rule: "got 0", logic: exp(0)},
		{name: "negative multiplier", field: "backoff.multiplier", rule: "got -2", logic: exp(-2)},
		{name: "multiplier NaN", field: "backoff.multiplier", rule: "got NaN", logic: exp(math.NaN())},
		{name: "multiplier infinite", field: "backoff.multiplier", rule: "got +Inf", logic: exp(math.Inf(1))},
		{name: "unknown kind", field: "backoff.kind", rule: `got "random"`,
			logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Kind: "random", Initial: sec(1)}}},
		{name: "empty kind", field: "backoff.kind", rule: `got ""`,
			logic: pipeline.RetryLogic{Times: 1, Backoff: pipeline.Backoff{Initial: sec(1)}}},
		{name: "negative jitter", field: "jitter", rule: "must not be negative",
			logic: pipeline.RetryLogic{Times: 1, Backoff: fixed(sec(1)), Jitter: sec(-0.1)}},
		{name: "empty non-retryable code", field: "non_retryable[1]", rule: "must not be empty",
			logic: pipeline.RetryLogic{Times: 1, Backoff: fixed(sec(1)), NonRetryable: []string{"a", ""}}},
		{name: "empty retry-on code", field: "retry_on[0]", rule: "must not be empty",
			logic: pipeline.RetryLogic{Times: 1, Backoff: fixed(sec(1)), RetryOn: []string{""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.logic.Validate()
			if !errors.Is(err, pipeline.ErrInvalid) {
				t.Fatalf("Validate() = %v, want an error matching ErrInvalid", err)
			}
			var ve *pipeline.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %T, want *ValidationError", err)
			}
			if ve.Field != tt.field {
				t.Errorf("Field = %q, want %q (error: %v)", ve.Field, tt.field, err)
			}
			if !strings.Contains(ve.Rule, tt.rule) {
				t.Errorf("Rule = %q, want it to contain %q", ve.Rule, tt.rule)
			}
		})
	}
}

// TestRetryLogicBase checks the delay formulas with worked numbers.
func TestRetryLogicBase(t *testing.T) {
	tests := []struct {
		name    string
		backoff pipeline.Backoff
		// want[i] is the delay before retry i+1.
		want []time.Duration
	}{
		{name: "linear 1s +2s cap 7s",
			backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: sec(1), Increment: sec(2), Max: sec(7)},
			want:    []time.Duration{1 * time.Second, 3 * time.Second, 5 * time.Second, 7 * time.Second, 7 * time.Second}},
		{name: "exponential 1s x2 cap 9s",
			backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(1), Multiplier: 2, Max: sec(9)},
			want:    []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 9 * time.Second}},
		{name: "exponential 100ms x1.5 uncapped",
			backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: pipeline.Duration(100 * time.Millisecond), Multiplier: 1.5},
			want:    []time.Duration{100 * time.Millisecond, 150 * time.Millisecond, 225 * time.Millisecond, 337500 * time.Microsecond}},
		{name: "linear uncapped",
			backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: sec(1), Increment: sec(0.5)},
			want:    []time.Duration{1000 * time.Millisecond, 1500 * time.Millisecond, 2000 * time.Millisecond, 2500 * time.Millisecond}},
		{name: "fixed 3s",
			backoff: fixed(sec(3)),
			want:    []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second}},
		{name: "fixed ignores increment and multiplier",
			backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: sec(1), Increment: sec(5), Multiplier: 10},
			want:    []time.Duration{time.Second, time.Second, time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := pipeline.RetryLogic{Times: pipeline.Forever, Backoff: tt.backoff}
			if err := r.Validate(); err != nil {
				t.Fatalf("test logic invalid: %v", err)
			}
			var got []time.Duration
			for n := 1; n <= len(tt.want); n++ {
				got = append(got, r.Base(n))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Base(1..%d) = %v, want %v", len(tt.want), got, tt.want)
			}
			if r.Base(0) != r.Base(1) || r.Base(-3) != r.Base(1) {
				t.Errorf("Base(0) = %s, Base(-3) = %s, want both Base(1) = %s", r.Base(0), r.Base(-3), r.Base(1))
			}
			// Without jitter, Delay is Base whatever the random source says.
			for n := 1; n <= len(tt.want); n++ {
				if d := r.Delay(n, func() float64 { return 0.99 }); d != tt.want[n-1] {
					t.Errorf("Delay(%d) without jitter = %s, want %s", n, d, tt.want[n-1])
				}
			}
		})
	}
}

func TestRetryLogicBaseSaturates(t *testing.T) {
	r := pipeline.RetryLogic{Times: pipeline.Forever, Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(1), Multiplier: 10}}
	for _, n := range []int{19, 20, 100, 10000} {
		if d := r.Base(n); d <= 0 || d != time.Duration(math.MaxInt64) {
			t.Errorf("Base(%d) = %s, want the largest duration", n, d)
		}
	}
}

func TestRetryLogicDelayJitter(t *testing.T) {
	tests := []struct {
		name    string
		backoff pipeline.Backoff
		jitter  pipeline.Duration
	}{
		{name: "fixed 1s ± 250ms", backoff: fixed(sec(1)), jitter: sec(0.25)},
		{name: "linear ± 1s", backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: sec(1), Increment: sec(2), Max: sec(7)}, jitter: sec(1)},
		{name: "jitter larger than the delay clamps at zero", backoff: fixed(sec(1)), jitter: sec(3)},
		{name: "exponential ± 1ns", backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(1), Multiplier: 2, Max: sec(9)}, jitter: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := pipeline.RetryLogic{Times: 5, Backoff: tt.backoff, Jitter: tt.jitter}
			if err := r.Validate(); err != nil {
				t.Fatalf("test logic invalid: %v", err)
			}
			src := rand.New(rand.NewPCG(4, 2))
			for n := 1; n <= 5; n++ {
				base := r.Base(n)
				lo, hi := max(base-tt.jitter.D(), 0), base+tt.jitter.D()
				if d := r.Delay(n, func() float64 { return 0 }); d != lo {
					t.Errorf("Delay(%d) with rnd()=0 = %s, want the lower bound %s", n, d, lo)
				}
				if d := r.Delay(n, func() float64 { return math.Nextafter(1, 0) }); d != hi {
					t.Errorf("Delay(%d) with rnd()→1 = %s, want the upper bound %s", n, d, hi)
				}
				if d := r.Delay(n, nil); d != base {
					t.Errorf("Delay(%d) with no source = %s, want the base %s", n, d, base)
				}
				seen := map[time.Duration]bool{}
				minD, maxD := hi, lo
				for range 2000 {
					d := r.Delay(n, src.Float64)
					if d < lo || d > hi {
						t.Fatalf("Delay(%d) = %s, outside [%s, %s]", n, d, lo, hi)
					}
					seen[d] = true
					minD, maxD = min(minD, d), max(maxD, d)
				}
				// The draws must actually spread: a jitter that is silently
				// ignored would pass the bounds check above.
				if span := hi - lo; span > 1000 && (minD > lo+span/10 || maxD < hi-span/10) {
					t.Errorf("Delay(%d) draws spread over [%s, %s] only, want most of [%s, %s]", n, minD, maxD, lo, hi)
				}
				if len(seen) < 2 {
					t.Errorf("Delay(%d): 2000 draws gave %d distinct delays", n, len(seen))
				}
			}
		})
	}
}

// TestRetryLogicDelayNeverNegative covers an uncapped exponential backoff
// with jitter once Base saturates at the largest duration.
func TestRetryLogicDelayNeverNegative(t *testing.T) {
	r := pipeline.RetryLogic{Times: pipeline.Forever, Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(1), Multiplier: 1e12}, Jitter: sec(1)}
	for n := 1; n <= 40; n++ {
		for _, x := range []float64{0, 0.5, 0.9, math.Nextafter(1, 0)} {
			if d := r.Delay(n, func() float64 { return x }); d < r.Base(n)-r.Jitter.D() {
				t.Errorf("Delay(%d) with rnd()=%g = %s, want ≥ %s", n, x, d, r.Base(n)-r.Jitter.D())
			}
		}
	}
}

func TestRetryLogicExhausted(t *testing.T) {
	tests := []struct {
		name     string
		times    pipeline.Times
		failures int
		want     bool
	}{
		{name: "times 0 after the first failure", times: 0, failures: 1, want: true},
		{name: "times 3 after 1 failure", times: 3, failures: 1, want: false},
		{name: "times 3 after 3 failures", times: 3, failures: 3, want: false},
		{name: "times 3 after 4 failures", times: 3, failures: 4, want: true},
		{name: "forever after 1 failure", times: pipeline.Forever, failures: 1, want: false},
		{name: "forever after a million failures", times: pipeline.Forever, failures: 1_000_000, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := pipeline.RetryLogic{Times: tt.times, Backoff: fixed(sec(1))}
			if got := r.Exhausted(tt.failures); got != tt.want {
				t.Fatalf("Times %d: Exhausted(%d) = %v, want %v", tt.times, tt.failures, got, tt.want)
			}
		})
	}
}

// codeErr implements pipeline.Coder itself, as a handler package's error type would.
type codeErr struct{ code string }

func (e codeErr) Error() string { return "failed with " + e.code }
func (e codeErr) Code() string  { return e.code }

var errTimeout = errors.New("upstream timeout")

func TestRetryLogicRetryable(t *testing.T) {
	base := errors.New("boom")
	exclude := pipeline.RetryLogic{Times: 3, Backoff: fixed(sec(1)), NonRetryable: []string{"invalid_input", "forbidden"}}
	only := pipeline.RetryLogic{Times: 3, Backoff: fixed(sec(1)), RetryOn: []string{"timeout", "unavailable"}, NonRetryable: []string{"forbidden"}}

	tests := []struct {
		name  string
		logic pipeline.RetryLogic
		err   error
		want  bool
	}{
		{name: "plain error is retried", logic: exclude, err: base, want: true},
		{name: "permanent is never retried", logic: exclude, err: pipeline.Permanent(base), want: false},
		{name: "permanent wrapped with %w is never retried", logic: exclude, err: fmt.Errorf("step 2: %w", pipeline.Permanent(base)), want: false},
		{name: "permanent joined is never retried", logic: exclude, err: errors.Join(base, pipeline.Permanent(base)), want: false},
		{name: "permanent beats retry-on", logic: only, err: pipeline.Permanent(pipeline.WithCode("timeout", base)), want: false},
		{name: "non-retryable code", logic: exclude, err: pipeline.WithCode("invalid_input", base), want: false},
		{name: "non-retryable code wrapped with %w", logic: exclude, err: fmt.Errorf("decode: %w", pipeline.WithCode("invalid_input", base)), want: false},
		{name: "non-retryable code deep in errors.Join", logic: exclude,
			err: fmt.Errorf("batch: %w", errors.Join(errors.New("first"), fmt.Errorf("second: %w", pipeline.WithCode("forbidden", base)))), want: false},
		{name: "non-retryable code from a Coder type", logic: exclude, err: fmt.Errorf("x: %w", codeErr{"forbidden"}), want: false},
		{name: "other code is retried", logic: exclude, err: pipeline.WithCode("timeout", base), want: true},
		{name: "retry-on code is retried", logic: only, err: pipeline.WithCode("timeout", base), want: true},
		{name: "retry-on code wrapped and joined", logic: only, err: errors.Join(base, fmt.Errorf("y: %w", pipeline.WithCode("unavailable", base))), want: true},
		{name: "retry-on: other code is not retried", logic: only, err: pipeline.WithCode("invalid_input", base), want: false},
		{name: "retry-on: uncoded error is not retried", logic: only, err: base, want: false},
		{name: "non-retryable beats retry-on in the same chain", logic: only,
			err: pipeline.WithCode("timeout", pipeline.WithCode("forbidden", base)), want: false},
		{name: "retry-on: a wrapped uncoded error is not retried", logic: only, err: fmt.Errorf("call: %w", errTimeout), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.logic.Retryable(tt.err); got != tt.want {
				t.Fatalf("Retryable(%v) = %v, want %v (codes %v, permanent %v)",
					tt.err, got, tt.want, pipeline.Codes(tt.err), pipeline.IsPermanent(tt.err))
			}
		})
	}
}

func TestRetryableCodes(t *testing.T) {
	r := pipeline.RetryLogic{Times: 1, Backoff: fixed(sec(1)), RetryOn: []string{"timeout"}}
	tests := []struct {
		name      string
		permanent bool
		codes     []string
		want      bool
	}{
		{name: "retry-on code", codes: []string{"timeout"}, want: true},
		{name: "permanent flag", permanent: true, codes: []string{"timeout"}, want: false},
		{name: "no code and no error", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.RetryableCodes(tt.permanent, tt.codes); got != tt.want {
				t.Fatalf("RetryableCodes(%v, %v) = %v, want %v", tt.permanent, tt.codes, got, tt.want)
			}
		})
	}
}

func TestCodes(t *testing.T) {
	base := errors.New("boom")
	tests := []struct {
		name string
		err  error
		want []string
	}{
		{name: "nil", err: nil, want: nil},
		{name: "uncoded", err: base, want: nil},
		{name: "outermost first", err: pipeline.WithCode("outer", fmt.Errorf("w: %w", pipeline.WithCode("inner", base))), want: []string{"outer", "inner"}},
		{name: "join in order", err: errors.Join(pipeline.WithCode("a", base), codeErr{"b"}), want: []string{"a", "b"}},
		{name: "through permanent", err: pipeline.Permanent(pipeline.WithCode("c", base)), want: []string{"c"}},
		{name: "empty code ignored", err: codeErr{""}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pipeline.Codes(tt.err); !slices.Equal(got, tt.want) {
				t.Fatalf("Codes() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestWithCodeAndPermanentKeepTheCause(t *testing.T) {
	if pipeline.WithCode("x", nil) != nil || pipeline.Permanent(nil) != nil {
		t.Fatal("WithCode(nil) and Permanent(nil) must be nil")
	}
	err := pipeline.Permanent(pipeline.WithCode("x", errTimeout))
	if !errors.Is(err, errTimeout) || !errors.Is(err, pipeline.ErrPermanent) || !pipeline.IsPermanent(err) {
		t.Fatalf("Permanent(WithCode(x, cause)) = %v lost the cause or the mark", err)
	}
	if err.Error() != errTimeout.Error() {
		t.Fatalf("Error() = %q, want the cause's message %q", err.Error(), errTimeout.Error())
	}
	if pipeline.IsPermanent(errTimeout) {
		t.Fatal("IsPermanent of an unmarked error = true")
	}
}

func TestTimesText(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    pipeline.Times
		wantErr bool
	}{
		{name: "indefinitely", json: `"indefinitely"`, want: pipeline.Forever},
		{name: "zero", json: `"0"`, want: 0},
		{name: "count", json: `"3"`, want: 3},
		{name: "large count", json: `"100000"`, want: 100000},
		{name: "minus one is not a spelling of forever", json: `"-1"`, wantErr: true},
		{name: "negative", json: `"-2"`, wantErr: true},
		{name: "word", json: `"many"`, wantErr: true},
		{name: "case matters", json: `"Indefinitely"`, wantErr: true},
		{name: "fraction", json: `"1.5"`, wantErr: true},
		{name: "empty", json: `""`, wantErr: true},
		{name: "negative bare number", json: `-2`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got pipeline.Times
			err := json.Unmarshal([]byte(tt.json), &got)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = %d, want an error", tt.json, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.json, err)
			}
			if got != tt.want {
				t.Fatalf("Unmarshal(%s) = %d, want %d", tt.json, got, tt.want)
			}
		})
	}
	for _, n := range []pipeline.Times{pipeline.Forever, 0, 1, 3, 1000} {
		b, err := json.Marshal(n)
		if err != nil {
			t.Fatalf("Marshal(%d): %v", n, err)
		}
		var back pipeline.Times
		if err := json.Unmarshal(b, &back); err != nil || back != n {
			t.Errorf("Times %d → %s → %d, %v", n, b, back, err)
		}
	}
	if b, _ := json.Marshal(pipeline.Forever); string(b) != `"indefinitely"` {
		t.Errorf("Marshal(Forever) = %s, want \"indefinitely\"", b)
	}
}

// TestTimesBareJSONNumber is what the Times doc promises: "In JSON it is a
// number or the string "indefinitely"".
func TestTimesBareJSONNumber(t *testing.T) {
	var r struct {
		Times pipeline.Times `json:"times"`
	}
	if err := json.Unmarshal([]byte(`{"times": 3}`), &r); err != nil || r.Times != 3 {
		t.Fatalf(`Unmarshal({"times": 3}) = %d, %v; want 3`, r.Times, err)
	}
}

func TestDurationText(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    time.Duration
		wantErr bool
	}{
		{name: "milliseconds", json: `"250ms"`, want: 250 * time.Millisecond},
		{name: "minutes", json: `"2m"`, want: 2 * time.Minute},
		{name: "compound", json: `"1h2m3.5s"`, want: time.Hour + 2*time.Minute + 3500*time.Millisecond},
		{name: "zero", json: `"0s"`, want: 0},
		{name: "negative", json: `"-1s"`, want: -time.Second},
		{name: "no unit", json: `"5"`, wantErr: true},
		{name: "word", json: `"soon"`, wantErr: true},
		{name: "bare number", json: `5000000000`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got pipeline.Duration
			err := json.Unmarshal([]byte(tt.json), &got)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Unmarshal(%s) = %s, want an error", tt.json, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Unmarshal(%s): %v", tt.json, err)
			}
			if got.D() != tt.want {
				t.Fatalf("Unmarshal(%s) = %s, want %s", tt.json, got, tt.want)
			}
		})
	}
	var d pipeline.Duration
	if err := d.UnmarshalText([]byte("soon")); err == nil || !strings.Contains(err.Error(), `expected a Go duration`) {
		t.Errorf("UnmarshalText(soon) = %v, want an error saying what was expected", err)
	}
	for _, v := range []time.Duration{0, 1, 1500 * time.Millisecond, -time.Minute, math.MaxInt64, math.MinInt64} {
		b, err := json.Marshal(pipeline.Duration(v))
		if err != nil {
			t.Fatalf("Marshal(%s): %v", v, err)
		}
		var back pipeline.Duration
		if err := json.Unmarshal(b, &back); err != nil || back.D() != v {
			t.Errorf("Duration %s → %s → %s, %v", v, b, back, err)
		}
	}
	if b, _ := json.Marshal(sec(1.5)); string(b) != `"1.5s"` {
		t.Errorf("Marshal(1.5s) = %s, want \"1.5s\"", b)
	}
}

// TestRetryLogicRoundTrip checks that a retry logic survives JSON (what
// people type) and msgpack (what the wire carries).
func TestRetryLogicRoundTrip(t *testing.T) {
	in := pipeline.RetryLogic{
		Times:        pipeline.Forever,
		Backoff:      pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(0.5), Multiplier: 1.5, Max: sec(30)},
		Jitter:       sec(0.1),
		NonRetryable: []string{"invalid_input"},
		RetryOn:      []string{"timeout"},
	}
	want := in
	codecs := []struct {
		name      string
		marshal   func(any) ([]byte, error)
		unmarshal func([]byte, any) error
	}{
		{name: "json", marshal: json.Marshal, unmarshal: json.Unmarshal},
		{name: "msgpack", marshal: msgpack.Marshal, unmarshal: msgpack.Unmarshal},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			b, err := c.marshal(&in)
			if err != nil {
				t.Fatal(err)
			}
			var got pipeline.RetryLogic
			if err := c.unmarshal(b, &got); err != nil {
				t.Fatalf("unmarshal %q: %v", b, err)
			}
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
			}
		})
	}
	var typed pipeline.RetryLogic
	const typedByAPerson = `{"times":"indefinitely","backoff":{"kind":"linear","initial":"1s","increment":"2s","max":"7s"},"jitter":"250ms"}`
	if err := json.Unmarshal([]byte(typedByAPerson), &typed); err != nil {
		t.Fatalf("Unmarshal(%s): %v", typedByAPerson, err)
	}
	if err := typed.Validate(); err != nil || typed.Base(4) != 7*time.Second || typed.Jitter.D() != 250*time.Millisecond {
		t.Fatalf("typed logic = %+v (%v), want linear 1s+2s capped at 7s with 250ms jitter", typed, err)
	}
}
