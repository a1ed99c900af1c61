package ticker

import "errors"

// ErrInvalid is matched (with errors.Is) by every error New, TickOnce and
// Request return for bad options or arguments. The message names the field
// and what was expected.
var ErrInvalid = errors.New("ticker: invalid options")

// ErrNoAnswer is matched by the error Request returns when no processor
// answered the tick: none is subscribed to the domain's tick subject, or
// none replied before the deadline. A request the server denies for
// permissions ends the same way, as a timeout.
var ErrNoAnswer = errors.New("ticker: no processor answered")

// ErrBadReport is matched by the error Request returns when the answer is
// not a api.TickReport, or says the processor rejected the tick itself.
var ErrBadReport = errors.New("ticker: bad report")

// ErrStopping is matched by the error Request returns when the processor
// that got the tick is shutting down (it answered 503): nothing ran, and
// the next tick reaches another replica.
var ErrStopping = errors.New("ticker: the processor is stopping")
