package authz

import "errors"

// ErrTable is matched by every error loading an authorization table.
var ErrTable = errors.New("authz: invalid authorization table")

// ErrNotProvisioned is matched by the error New returns when a stream,
// consumer or bucket authz binds to does not exist: the system was not
// provisioned yet. Provision it first as a user allowed to create streams
// (admin in nats.conf), with `processor -provision` or `authz -domain`.
var ErrNotProvisioned = errors.New("authz: not provisioned (provision first, as a user allowed to create streams such as admin: processor -provision, or authz -domain)")
