package underwriting

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tickflow/tickflow/x/steps"
)

// ErrInvalid is matched by every *ValidationError.
var ErrInvalid = errors.New("underwriting: invalid input")

// ErrInjected is matched by every *InjectedError.
var ErrInjected = errors.New("underwriting: injected failure")

// ErrNoRecordSource is returned by ClearBusinessReport's processing step when
// it has no RecordSource to query.
var ErrNoRecordSource = errors.New("underwriting: no public record source configured")

// Problem is one rule an input broke.
type Problem struct {
	// Field is the offending field, e.g. "business_ein".
	Field string
	// Rule says what was expected and what was found.
	Rule string
}

// ValidationError lists every problem a validation step found, so a person
// can fix them all at once. It matches ErrInvalid.
type ValidationError struct {
	// Processor is the processor that rejected the input, e.g. "p_application_form".
	Processor string
	Problems  []Problem
}

// Error implements error.
func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.Field + ": " + p.Rule
	}
	return fmt.Sprintf("underwriting: %s: invalid input: %s", e.Processor, strings.Join(parts, "; "))
}

// Is makes every ValidationError match ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// problems collects validation problems for one processor.
type problems struct {
	processor string
	list      []Problem
}

func (p *problems) add(field, format string, args ...any) {
	p.list = append(p.list, Problem{Field: field, Rule: fmt.Sprintf(format, args...)})
}

// err returns a *ValidationError if any problem was added, else nil.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	return &ValidationError{Processor: p.processor, Problems: p.list}
}

// InjectedError is the failure Faults injects. It matches ErrInjected.
type InjectedError struct {
	Processor string
	Step      steps.Step
}

// Error implements error.
func (e *InjectedError) Error() string {
	return fmt.Sprintf("underwriting: %s: injected failure at %s", e.Processor, e.Step)
}

// Is makes every InjectedError match ErrInjected.
func (e *InjectedError) Is(target error) bool { return target == ErrInjected }
