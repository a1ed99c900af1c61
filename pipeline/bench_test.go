package pipeline_test

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

func benchRetryLogics() map[string]*pipeline.RetryLogic {
	d := func(x time.Duration) pipeline.Duration { return pipeline.Duration(x) }
	return map[string]*pipeline.RetryLogic{
		"fixed": {Times: 5, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: d(50 * time.Millisecond)}},
		"linear": {Times: 5, Backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: d(100 * time.Millisecond),
			Increment: d(100 * time.Millisecond), Max: d(time.Second)}},
		"exponential": {Times: pipeline.Forever, Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: d(100 * time.Millisecond),
			Multiplier: 2, Max: d(time.Minute)}},
		"exponential+jitter": {Times: pipeline.Forever, Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: d(100 * time.Millisecond),
			Multiplier: 2, Max: d(time.Minute)}, Jitter: d(20 * time.Millisecond)},
	}
}

// BenchmarkRetryDelay is the delay computation of each backoff kind, over
// retries 1 to 16.
func BenchmarkRetryDelay(b *testing.B) {
	for name, r := range benchRetryLogics() {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n = n%16 + 1
				if r.Delay(n, rand.Float64) < 0 {
					b.Fatal("negative delay")
				}
			}
		})
	}
}

// BenchmarkDecide is the failure chain's verdict on a failed attempt: a
// retry, retries exhausted, and an error that is not retryable.
func BenchmarkDecide(b *testing.B) {
	r := benchRetryLogics()["exponential+jitter"]
	limited := benchRetryLogics()["linear"]
	cases := []struct {
		name      string
		r         *pipeline.RetryLogic
		failures  int
		retryable bool
	}{
		{"retry", r, 3, true},
		{"exhausted", limited, 6, true},
		{"not-retryable", r, 1, false},
		{"no-logic", nil, 1, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = pipeline.Decide(c.r, c.failures, c.retryable, rand.Float64)
			}
		})
	}
}

// BenchmarkRetryable classifies a handler error along its chain, as a
// worker does before answering.
func BenchmarkRetryable(b *testing.B) {
	r := &pipeline.RetryLogic{Times: 3, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(time.Second)},
		NonRetryable: []string{"invalid_input"}}
	err := pipeline.WithCode("upstream", errors.Join(errors.New("gateway timeout"), pipeline.WithCode("timeout", errors.New("deadline"))))
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Retryable(err)
	}
}
