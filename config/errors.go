package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tickflow/tickflow/pipeline"
)

// ErrInvalid is matched (with errors.Is) by every error that says the
// configuration itself is wrong: a rule broken in Validate, an unknown or
// mistyped field in the file, a bad environment value. The error names the
// field or variable and the rule. Errors reading the file are returned
// wrapped as they come (errors.Is(err, fs.ErrNotExist) works).
var ErrInvalid = errors.New("config: invalid")

// FieldError says which field broke which rule. It matches ErrInvalid with
// errors.Is, and unwraps to the cause when another package's check failed
// (streams.ErrSettings, pipeline.ErrInvalid).
type FieldError struct {
	// Field is the path of the offending field as written in the config
	// file, e.g. "processor.domains[1]", or an environment variable name.
	Field string
	// Rule says what was expected, e.g. "must be ≥ 1 (got 0)".
	Rule string
	// Err is the underlying error, if any.
	Err error
}

// Error formats the error as "config: <field>: <rule>".
func (e *FieldError) Error() string {
	if e.Field == "" {
		return "config: " + e.Rule
	}
	return "config: " + e.Field + ": " + e.Rule
}

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns the underlying error, if any.
func (e *FieldError) Unwrap() error { return e.Err }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// under re-roots every FieldError in err (a single error or an errors.Join)
// under parent: "url" under "processor.nats" becomes "processor.nats.url".
func under(parent string, err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs := j.Unwrap()
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = under(parent, e)
		}
		return errors.Join(out...)
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		sep := "."
		if fe.Field == "" || strings.HasPrefix(fe.Field, "[") {
			sep = ""
		}
		return &FieldError{Field: parent + sep + fe.Field, Rule: fe.Rule, Err: fe.Err}
	}
	return err
}

// because turns an error from another package's check into a FieldError for
// field, keeping the other package's wording of the rule and the error
// itself as the cause.
func because(field string, err error) error {
	var ve *pipeline.ValidationError
	if errors.As(err, &ve) {
		return &FieldError{Field: field, Rule: ve.Rule, Err: err}
	}
	return &FieldError{Field: field, Rule: err.Error(), Err: err}
}
