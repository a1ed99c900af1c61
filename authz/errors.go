package authz

import (
	"errors"
	"fmt"

	"github.com/tickflow/tickflow/internal/records"
)

// ErrTable is matched by every error loading an authorization table.
var ErrTable = errors.New("authz: invalid authorization table")

// ErrNotProvisioned is matched by the error New returns when a stream,
// consumer or bucket authz binds to does not exist: the system was not
// provisioned yet. Provision it first as a user allowed to create streams
// (admin in nats.conf), with `processor -provision` or `authz -domain`.
var ErrNotProvisioned = errors.New("authz: not provisioned (provision first, as a user allowed to create streams such as admin: processor -provision, or authz -domain)")

// ErrUnreadable is matched by the error Apply returns when a batch record
// cannot be read: malformed bytes, or a record written by a newer version
// during a rolling upgrade. Retrying soon cannot help; the callback is
// retried a bounded number of times and then dead-lettered.
var ErrUnreadable = errors.New("authz: record unreadable")

// ErrCallbackGroup is matched by the reason of a dead letter that holds a
// whole group of callbacks authz refused: more than
// records.CallbackGroupMax in one message. Its replay applies them all.
var ErrCallbackGroup = errors.New("authz: callback group refused")

// unreadableError is an ErrUnreadable that remembers which record could not
// be read and, when it was readable that far, its wire version.
type unreadableError struct {
	what    string
	version uint8 // 0: unknown
	err     error
}

// unreadable wraps a decoding error of record what, whose decoded version
// field was v (trusted only when the decoder rejected the version).
func unreadable(what string, v uint8, err error) *unreadableError {
	e := &unreadableError{what: what, err: err}
	if errors.Is(err, records.ErrVersion) {
		e.version = v
	}
	return e
}

func (e *unreadableError) Error() string {
	return fmt.Sprintf("authz: %s unreadable: %v", e.what, e.err)
}

func (e *unreadableError) Is(target error) bool { return target == ErrUnreadable }

func (e *unreadableError) Unwrap() error { return e.err }
