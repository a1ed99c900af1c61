package pipeline

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (with errors.Is) by every validation error this
// package returns; the error itself is a *ValidationError naming the field.
var ErrInvalid = errors.New("pipeline: invalid")

// ErrPermanent marks a handler error that must not be retried. Wrap an error
// with Permanent to attach it; IsPermanent reports it along the whole chain.
var ErrPermanent = errors.New("pipeline: permanent failure")

// ErrNoHandler is returned by a ServeMux for a function type nobody registered.
var ErrNoHandler = errors.New("pipeline: no handler for function type")

// ErrPayload is matched by every error of Payload.Decode: the payload does
// not decode into the value the handler gave (a key no field is named for,
// a value of the wrong type). Such an error is Permanent.
var ErrPayload = errors.New("pipeline: payload does not decode")

// ValidationError says which field of a batch, function or retry logic broke
// which rule. It matches ErrInvalid with errors.Is.
type ValidationError struct {
	// Field is the path of the offending field, e.g. "functions[2].retry.backoff.multiplier".
	Field string
	// Rule says what was expected, e.g. "must be > 1 for exponential backoff (got 1)".
	Rule string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("pipeline: invalid %s: %s", e.Field, e.Rule)
}

// Is makes every ValidationError match ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// prefix re-roots a nested validation error under a parent field.
func prefix(parent string, err error) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		return &ValidationError{Field: parent + "." + ve.Field, Rule: ve.Rule}
	}
	return err
}

// permanentError carries ErrPermanent next to the handler's own error, so both
// errors.Is(err, ErrPermanent) and errors.Is(err, cause) hold.
type permanentError struct{ err error }

func (p *permanentError) Error() string   { return p.err.Error() }
func (p *permanentError) Unwrap() []error { return []error{p.err, ErrPermanent} }

// Permanent marks err as not retryable: the failure chain skips the remaining
// retries and goes straight to the fallback, then to permanent failure.
// Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked Permanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }
