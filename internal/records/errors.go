package records

import "errors"

// ErrVersion is returned when a wire record carries a version this build does not read.
var ErrVersion = errors.New("records: unsupported wire version")

// ErrDecode is matched by every error decoding a wire record.
var ErrDecode = errors.New("records: cannot decode")
