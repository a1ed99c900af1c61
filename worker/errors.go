package worker

import "errors"

// ErrOutputTooLarge is the permanent failure of a call whose outputs do not
// fit in a completion record (and a reply) under the server's max_payload:
// its effect happened, but nothing could keep its result.
var ErrOutputTooLarge = errors.New("worker: outputs too large to keep")
