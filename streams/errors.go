package streams

import "errors"

// ErrSettings is matched by errors from Settings.Validate.
var ErrSettings = errors.New("streams: invalid settings")

// ErrVersion is returned when a wire record carries a version this build does not read.
var ErrVersion = errors.New("streams: unsupported wire version")

// ErrDecode is matched by every error decoding a wire record.
var ErrDecode = errors.New("streams: cannot decode")
