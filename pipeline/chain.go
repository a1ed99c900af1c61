package pipeline

import "time"

// Move is what the failure chain does after a failed attempt:
// handler → retry → fallback → permanent failure.
type Move int

// The moves of the failure chain.
const (
	// MoveRetry schedules another attempt after Decision.Delay.
	MoveRetry Move = iota + 1
	// MoveFallback gives up on the handler and invokes the fallback, if any;
	// when there is none, or it fails too, the item fails permanently.
	MoveFallback
)

// Decision is the failure chain's verdict on one failed attempt.
type Decision struct {
	Move Move
	// Delay is the wait before the retry (MoveRetry only).
	Delay time.Duration
	// Exhausted is true when retries ran out; false with MoveFallback means
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
		return Decision{Move: MoveFallback}
	}
	if r.Exhausted(failures) {
		return Decision{Move: MoveFallback, Exhausted: true}
	}
	return Decision{Move: MoveRetry, Delay: r.Delay(failures, rnd)}
}
