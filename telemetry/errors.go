package telemetry

import "errors"

// ErrListen matches the error of Listen when the address cannot be listened on.
var ErrListen = errors.New("telemetry: cannot listen")

// ErrNotReady matches the error of a readiness check that failed.
var ErrNotReady = errors.New("telemetry: not ready")
