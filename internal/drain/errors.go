package drain

import "errors"

// ErrIncomplete matches the error Closed and Delivered return when their
// bound passed first: messages may still be on their way to a handler,
// which will refuse them (Gate) if the connection still lets it answer.
var ErrIncomplete = errors.New("drain: subscriptions not drained in time")
