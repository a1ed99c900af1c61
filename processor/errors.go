package processor

import "errors"

// ErrOutputsTooLarge is the permanent failure of a non-atomic batch's
// function whose output cannot be kept beside the outputs before it: the
// batch's progress, the next function's request and the dead letter would
// outgrow the server's max_payload. The batch ends PartiallyExecuted(n).
var ErrOutputsTooLarge = errors.New("processor: outputs too large to keep")

// ErrPace is matched by a pace that is neither PaceReady nor PaceTick.
var ErrPace = errors.New("processor: unknown pace")

// ErrThrottle is matched by a negative Options.Throttle.
var ErrThrottle = errors.New("processor: throttle must be ≥ 0 steps per second")
