package api

import "github.com/tickflow/tickflow/logging"

// The codes of authz's error replies, as in HTTP. An error reply carries
// its code in the Nats-Service-Error-Code header and its message in
// Nats-Service-Error.
const (
	// CodeBadRequest answers a request that is malformed or breaks a rule;
	// the message says which field was wrong and what was expected.
	CodeBadRequest = 400
	// CodeForbidden answers a caller that may not do this (an operation
	// for the owner only, a label the caller may not submit under).
	CodeForbidden = 403
	// CodeNotFound answers a request for a label, batch or dead letter that
	// does not exist, or that the caller may not know about.
	CodeNotFound = 404
	// CodeConflict answers a request that collides with the state: a limit
	// reached, an edit in progress, a finished batch, a reused
	// idempotency key.
	CodeConflict = 409
	// CodeTooManyRequests answers a caller over one of its bounds (its
	// requests in flight, its send rate, its unfinished batches under a
	// label or a key): nothing was done, the message names the bound, and
	// trying again later may succeed.
	CodeTooManyRequests = 429
	// CodeOutOfBounds answers a position past the end of a queue.
	CodeOutOfBounds = 416
	// CodeInternal answers a request that failed inside authz.
	CodeInternal = 500
	// CodeUnavailable answers a request that reached a replica as it was
	// stopping: nothing was done, and trying again reaches another replica.
	CodeUnavailable = 503
)

// MaxErrorMessage bounds the message of an error reply, in bytes: authz
// caps what it quotes of a caller's input, and the message as a whole.
const MaxErrorMessage = 16 * logging.CapBytes
