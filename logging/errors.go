package logging

import "errors"

// ErrFormat is matched by the error New and ValidateFormat return for a
// format other than "auto", "text" or "json".
var ErrFormat = errors.New("logging: unknown format")

// ErrLevel is matched by the error New and ParseLevel return for a level
// other than "debug", "info", "warn" or "error".
var ErrLevel = errors.New("logging: unknown level")
