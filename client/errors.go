package client

import (
	"errors"
	"fmt"

	"github.com/tickflow/tickflow/api"
)

// ErrInvalid is matched by the error of a request the client refused
// before sending it: the message says which field was wrong and what was
// expected.
var ErrInvalid = errors.New("client: invalid request")

// ErrNotRunning is matched, as is nats.ErrNoResponders, by the error of a
// request that no authz replica was subscribed to receive: authz is not
// running (or not yet).
var ErrNotRunning = errors.New("client: authz is not running (no responders)")

// ErrNoAnswer is matched, as is context.DeadlineExceeded, by the error of a
// request that got no answer before its deadline. The server drops a request
// its permissions deny without an answer (reporting it only to the
// connection's asynchronous error handler), so this is also what a request
// published as another user, or on a subject the user may not publish on,
// gets.
var ErrNoAnswer = errors.New("client: no answer from authz (a request the server's permissions deny gets none either)")

// Sentinels of authz's error codes: an *Error matches the one of its code
// with errors.Is.
var (
	// ErrBadRequest: 400, the request is malformed or breaks a rule.
	ErrBadRequest = errors.New("client: bad request")
	// ErrForbidden: 403, the caller may not do this.
	ErrForbidden = errors.New("client: forbidden")
	// ErrNotFound: 404, no such label, batch or dead letter, or one the
	// caller may not know about.
	ErrNotFound = errors.New("client: not found")
	// ErrConflict: 409, a limit, an edit in progress, a finished batch or a
	// reused idempotency key.
	ErrConflict = errors.New("client: conflict")
	// ErrOutOfBounds: 416, a position past the end of a queue.
	ErrOutOfBounds = errors.New("client: index out of bounds")
	// ErrTooManyRequests: 429, the caller is over one of its bounds (requests
	// in flight, send rate, unfinished batches under a label): nothing was
	// done, the message names the bound, and trying again later may succeed.
	ErrTooManyRequests = errors.New("client: too many requests")
	// ErrInternal: 500, something failed inside authz.
	ErrInternal = errors.New("client: internal error")
	// ErrUnavailable: 503, the request reached a replica as it was stopping;
	// nothing was done and sending it again reaches another.
	ErrUnavailable = errors.New("client: unavailable")
)

var codeErrors = map[int]error{
	api.CodeBadRequest:      ErrBadRequest,
	api.CodeForbidden:       ErrForbidden,
	api.CodeNotFound:        ErrNotFound,
	api.CodeConflict:        ErrConflict,
	api.CodeOutOfBounds:     ErrOutOfBounds,
	api.CodeTooManyRequests: ErrTooManyRequests,
	api.CodeInternal:        ErrInternal,
	api.CodeUnavailable:     ErrUnavailable,
}

// Error is an error reply of authz: the operation, the code (HTTP-like, see
// api.CodeNotFound and its siblings) and the message that says what was
// wrong.
type Error struct {
	Op      string
	Code    int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("client: %s: %d %s", e.Op, e.Code, e.Message)
}

// Is matches the sentinel of e's code: errors.Is(err, ErrNotFound) holds
// for a 404.
func (e *Error) Is(target error) bool {
	s, ok := codeErrors[e.Code]
	return ok && s == target
}
