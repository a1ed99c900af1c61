package worker

import "errors"

// ErrOutputTooLarge is the permanent failure of a call whose outputs do not
// fit in a completion record (and a reply) under the server's max_payload:
// its effect happened, but nothing could keep its result.
var ErrOutputTooLarge = errors.New("worker: outputs too large to keep")

// ErrSecretRef is matched by the error of a sender's secret reference that
// is malformed, names no configured sender, or cannot be resolved.
var ErrSecretRef = errors.New("worker: sender secret")
