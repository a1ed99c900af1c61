package steps

import (
	"errors"
	"fmt"
)

// ErrImplementation is returned (wrapped) by New when a Processor's
// declaration is unusable: a nil processor, a blank name, or no required
// dependency left after dropping names that start with neither "p_" nor "s_".
// It is the step pipeline's error for a processor subclass that does not
// implement what it must.
var ErrImplementation = errors.New("steps: processor implementation error")

// ErrNilStore is returned by New when it is given no RunStore.
var ErrNilStore = errors.New("steps: run store is nil")

// ErrDependencyNotFound is matched by every *DependencyNotFoundError.
var ErrDependencyNotFound = errors.New("steps: dependency not found")

// ErrDependencyMismatch is matched by every *DependencyMismatchError. It says an
// input belongs to another subject (another underwriting) than the run's.
var ErrDependencyMismatch = errors.New("steps: dependency belongs to another subject")

// ErrEmptySubject fails the dependency step of an Execute called without a
// subject id: dependencies cannot be matched, nor runs recorded, without one.
var ErrEmptySubject = errors.New("steps: subject id is empty")

// ErrNotFound is returned (possibly wrapped) by a RunStore for a run record or
// step output it does not hold.
var ErrNotFound = errors.New("steps: not found")

// ErrPanic is matched by every *PanicError.
var ErrPanic = errors.New("steps: step panicked")

// ErrStepFailed is matched by the error Result.Err returns for a failed run.
var ErrStepFailed = errors.New("steps: step failed")

// ErrUnknownInput is returned (wrapped) by DecodeInput, and by the JSON
// decoding of Result and Stipulation, for data whose "kind" is missing or
// not the expected one.
var ErrUnknownInput = errors.New("steps: unknown input kind")

// DependencyNotFoundError reports a required dependency absent from a run's
// inputs. It matches ErrDependencyNotFound.
type DependencyNotFoundError struct {
	RunID      string
	Processor  string
	SubjectID  string
	Dependency string
}

// Error implements error.
func (e *DependencyNotFoundError) Error() string {
	return fmt.Sprintf("steps: %s (run %s, subject %q): required dependency %q is not among the inputs",
		e.Processor, e.RunID, e.SubjectID, e.Dependency)
}

// Is makes every DependencyNotFoundError match ErrDependencyNotFound.
func (e *DependencyNotFoundError) Is(target error) bool { return target == ErrDependencyNotFound }

// DependencyMismatchError reports an input that carries a declared
// dependency's name but belongs to another subject. It matches
// ErrDependencyMismatch.
type DependencyMismatchError struct {
	RunID      string
	Processor  string
	SubjectID  string
	Dependency string
	// InputSubjectID is the subject the offending input belongs to.
	InputSubjectID string
}

// Error implements error.
func (e *DependencyMismatchError) Error() string {
	return fmt.Sprintf("steps: %s (run %s, subject %q): dependency %q belongs to subject %q",
		e.Processor, e.RunID, e.SubjectID, e.Dependency, e.InputSubjectID)
}

// Is makes every DependencyMismatchError match ErrDependencyMismatch.
func (e *DependencyMismatchError) Is(target error) bool { return target == ErrDependencyMismatch }

// PanicError is a panic recovered from a step; the run fails at that step
// with exception name "panic". It matches ErrPanic.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error implements error.
func (e *PanicError) Error() string { return fmt.Sprintf("steps: panic: %v", e.Value) }

// Is makes every PanicError match ErrPanic.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }
