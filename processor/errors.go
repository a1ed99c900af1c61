package processor

import "errors"

// ErrOutputsTooLarge is the permanent failure of a non-atomic batch's
// function whose output cannot be kept beside the outputs before it: the
// batch's progress, the next function's request and the dead letter would
// outgrow the server's max_payload. The batch ends PartiallyExecuted(n).
var ErrOutputsTooLarge = errors.New("processor: outputs too large to keep")
