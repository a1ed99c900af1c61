package pipeline

import "time"

// Step is what the failure chain decides after a failed attempt:
// handler → retry → fallback → permanent failure.
type Step int

// The steps of the failure chain.
const (
	// RetryStep schedules another attempt after Decision.Delay.
	RetryStep Step = iota + 1
	// FallbackStep gives up on the handler and invokes the fallback, if any;
	// when there is none, or it fails too, the item fails permanently.
	FallbackStep
)

// Decision is the failure chain's verdict on one failed attempt.
type Decision struct {
	Step Step
	// Delay is the wait before the retry (RetryStep only).
	Delay time.Duration
	// Exhausted is true when retries ran out; false with FallbackStep means
	// the error was not retryable.
	Exhausted bool
}

// Decide applies the retry logic to an item that has now failed `failures`
// times (≥ 1), the last time with an error that was, or was not, retryable.
// rnd supplies jitter (nil: none). It is the single implementation of the
// rules, used for atomic batches and non-atomic functions alike.
func Decide(r *RetryLogic, failures int, retryable bool, rnd func() float64) Decision {
	if r == nil {
		r = &NoRetry
	}
	if !retryable {
		return Decision{Step: FallbackStep}
	}
	if r.Exhausted(failures) {
		return Decision{Step: FallbackStep, Exhausted: true}
	}
	return Decision{Step: RetryStep, Delay: r.Delay(failures, rnd)}
}
