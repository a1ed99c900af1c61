package main

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/client"
)

// Exit codes: what failed, for scripts. docs/cli.md lists them.
const (
	// ExitOK: done (wait: the batch executed).
	ExitOK = 0
	// ExitUsage: bad flags or arguments, a batch file that does not read,
	// or a request refused as invalid (before sending it, or by authz: 400,
	// 416).
	ExitUsage = 1
	// ExitConnection: no connection (the server, the credentials, the
	// settings or the context), authz not running, no answer in time, or
	// authz stopping (503).
	ExitConnection = 2
	// ExitNotFound: no such label, batch or dead letter, or none the user
	// may know of (404).
	ExitNotFound = 3
	// ExitRefused: the user may not do this (403), or it conflicts with
	// what is (409: a finished batch, a reused idempotency key, a limit).
	ExitRefused = 4
	// ExitTooMany: over one of the user's bounds (429); try again later.
	ExitTooMany = 5
	// ExitBatchFailed: wait (or send --wait): the batch finished, but not
	// as Executed.
	ExitBatchFailed = 6
	// ExitInternal: authz failed inside (500), or anything else.
	ExitInternal = 7
	// ExitTimeout: wait (or send --wait): the batch had not finished when
	// --timeout ran out.
	ExitTimeout = 8
	// ExitInterrupted: interrupted (Ctrl-C), as a shell counts SIGINT.
	ExitInterrupted = 130
)

// errUsage is matched by bad input the command itself found: a flag, an
// argument, a batch file.
var errUsage = errors.New("usage")

// errSettings is matched by connection settings that do not work: an
// unknown context, two ways of authenticating, no user.
var errSettings = errors.New("connection settings")

// errBatchFailed is matched by the error of wait for a batch that finished
// otherwise than Executed.
var errBatchFailed = errors.New("batch did not execute")

// errWaitTimeout is matched by the error of wait when --timeout ran out.
var errWaitTimeout = errors.New("batch not finished")

// exitCode says which exit code err calls for.
func exitCode(err error) int {
	var ce *connectError
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errBatchFailed):
		return ExitBatchFailed
	case errors.Is(err, errWaitTimeout):
		return ExitTimeout
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.Is(err, errUsage), errors.Is(err, client.ErrInvalid),
		errors.Is(err, client.ErrBadRequest), errors.Is(err, client.ErrOutOfBounds):
		return ExitUsage
	case errors.Is(err, errSettings), errors.As(err, &ce), errors.Is(err, client.ErrNotRunning),
		errors.Is(err, client.ErrNoAnswer), errors.Is(err, client.ErrUnavailable),
		errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrNoServers):
		return ExitConnection
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, client.ErrForbidden), errors.Is(err, client.ErrConflict):
		return ExitRefused
	case errors.Is(err, client.ErrTooManyRequests):
		return ExitTooMany
	}
	return ExitInternal
}
