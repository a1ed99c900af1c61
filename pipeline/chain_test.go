package pipeline_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

func TestDecide(t *testing.T) {
	linear := &pipeline.RetryLogic{Times: 3, Backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: sec(1), Increment: sec(2), Max: sec(7)}}
	jittered := &pipeline.RetryLogic{Times: 3, Backoff: fixed(sec(2)), Jitter: sec(1)}
	forever := &pipeline.RetryLogic{Times: pipeline.Forever, Backoff: fixed(sec(1))}
	tests := []struct {
		name      string
		logic     *pipeline.RetryLogic
		failures  int
		retryable bool
		rnd       func() float64
		want      pipeline.Decision
	}{
		{name: "first failure retries after the first delay", logic: linear, failures: 1, retryable: true,
			want: pipeline.Decision{Move: pipeline.MoveRetry, Delay: time.Second}},
		{name: "third failure retries after the third delay", logic: linear, failures: 3, retryable: true,
			want: pipeline.Decision{Move: pipeline.MoveRetry, Delay: 5 * time.Second}},
		{name: "retries exhausted go to the fallback", logic: linear, failures: 4, retryable: true,
			want: pipeline.Decision{Move: pipeline.MoveFallback, Exhausted: true}},
		{name: "non-retryable goes to the fallback with retries left", logic: linear, failures: 1, retryable: false,
			want: pipeline.Decision{Move: pipeline.MoveFallback}},
		{name: "non-retryable and exhausted is reported as non-retryable", logic: linear, failures: 9, retryable: false,
			want: pipeline.Decision{Move: pipeline.MoveFallback}},
		{name: "nil logic is one attempt", logic: nil, failures: 1, retryable: true,
			want: pipeline.Decision{Move: pipeline.MoveFallback, Exhausted: true}},
		{name: "NoRetry is one attempt", logic: &pipeline.NoRetry, failures: 1, retryable: true,
			want: pipeline.Decision{Move: pipeline.MoveFallback, Exhausted: true}},
		{name: "forever never exhausts", logic: forever, failures: 100_000, retryable: true,
			want: pipeline.Decision{Move: pipeline.MoveRetry, Delay: time.Second}},
		{name: "jitter drawn from rnd, low end", logic: jittered, failures: 1, retryable: true, rnd: func() float64 { return 0 },
			want: pipeline.Decision{Move: pipeline.MoveRetry, Delay: time.Second}},
		{name: "jitter drawn from rnd, middle", logic: jittered, failures: 2, retryable: true, rnd: func() float64 { return 0.75 },
			want: pipeline.Decision{Move: pipeline.MoveRetry, Delay: 2500 * time.Millisecond}},
		{name: "no rnd means no jitter", logic: jittered, failures: 2, retryable: true,
			want: pipeline.Decision{Move: pipeline.MoveRetry, Delay: 2 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pipeline.Decide(tt.logic, tt.failures, tt.retryable, tt.rnd); got != tt.want {
				t.Fatalf("Decide(failures %d, retryable %v) = %+v, want %+v", tt.failures, tt.retryable, got, tt.want)
			}
		})
	}
}

// TestDecideWalksTheChain replays the processing chain's failure handling: a handler that
// keeps failing is retried Times times with the backoff's delays, then
// handed to the fallback.
func TestDecideWalksTheChain(t *testing.T) {
	r := &pipeline.RetryLogic{Times: 5, Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: sec(1), Multiplier: 2, Max: sec(9)}}
	handlerErr := errors.New("gateway timeout")
	var delays []time.Duration
	for failures := 1; ; failures++ {
		d := pipeline.Decide(r, failures, r.Retryable(handlerErr), nil)
		if d.Move == pipeline.MoveFallback {
			if !d.Exhausted || failures != 6 {
				t.Fatalf("fallback after %d failures, exhausted %v; want after 6, exhausted", failures, d.Exhausted)
			}
			break
		}
		delays = append(delays, d.Delay)
		if failures > 10 {
			t.Fatal("never reached the fallback")
		}
	}
	want := []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 9 * time.Second}
	if len(delays) != len(want) {
		t.Fatalf("delays %v, want %v", delays, want)
	}
	for i := range want {
		if delays[i] != want[i] {
			t.Fatalf("delays %v, want %v", delays, want)
		}
	}
	if d := pipeline.Decide(r, 1, r.Retryable(pipeline.Permanent(handlerErr)), nil); d != (pipeline.Decision{Move: pipeline.MoveFallback}) {
		t.Fatalf("a permanent error decided %+v, want the fallback without retries", d)
	}
}

func TestOutcomeString(t *testing.T) {
	tests := []struct {
		name    string
		outcome pipeline.Outcome
		want    string
	}{
		{name: "executed", outcome: pipeline.ExecutedOutcome(3), want: "Executed"},
		{name: "rejected", outcome: pipeline.RejectedOutcome("card declined"), want: "Rejected(card declined)"},
		{name: "partially executed", outcome: pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 2}, want: "PartiallyExecuted(2)"},
		{name: "removed by owner", outcome: pipeline.RemovedOutcome(1), want: "RemovedByOwner"},
		{name: "expired", outcome: pipeline.ExpiredOutcome(4), want: "Expired(4)"},
		{name: "expired before any function", outcome: pipeline.ExpiredOutcome(0), want: "Expired(0)"},
		{name: "in process", outcome: pipeline.Outcome{Status: pipeline.InProcess}, want: "InProcess"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.outcome.String(); got != tt.want {
				t.Fatalf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFailedAfter(t *testing.T) {
	tests := []struct {
		name string
		n    int
		want pipeline.Outcome
	}{
		{name: "nothing took effect is Rejected", n: 0,
			want: pipeline.Outcome{Status: pipeline.Rejected, Reason: "limit exceeded"}},
		{name: "one took effect is PartiallyExecuted(1)", n: 1,
			want: pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 1, Reason: "limit exceeded"}},
		{name: "n took effect is PartiallyExecuted(n)", n: 7,
			want: pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 7, Reason: "limit exceeded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := pipeline.FailedAfter(tt.n, "limit exceeded")
			if got != tt.want {
				t.Fatalf("FailedAfter(%d) = %+v, want %+v", tt.n, got, tt.want)
			}
			if !got.Status.Terminal() {
				t.Fatalf("FailedAfter(%d) is not terminal", tt.n)
			}
		})
	}
}

func TestStatusTerminal(t *testing.T) {
	tests := []struct {
		status pipeline.Status
		want   bool
	}{
		{status: pipeline.InProcess, want: false},
		{status: "", want: false},
		{status: pipeline.Executed, want: true},
		{status: pipeline.Rejected, want: true},
		{status: pipeline.PartiallyExecuted, want: true},
		{status: pipeline.RemovedByOwner, want: true},
		{status: pipeline.Expired, want: true},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			if got := tt.status.Terminal(); got != tt.want {
				t.Fatalf("%q.Terminal() = %v, want %v", tt.status, got, tt.want)
			}
		})
	}
}
