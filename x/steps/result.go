package steps

import (
	"encoding/json"
	"fmt"
	"time"
)

// Result is the outcome of one Execute: one attempt of one processor for one
// subject (a processing result). It is also an Input: the next
// processor declares it as the dependency "p_"+Name().
//
// A Result encodes to JSON with "kind": "result" and decodes back (with
// DecodeInput or json.Unmarshal) into an equivalent Result, except for the
// in-process cause returned by Err, which becomes a message.
type Result struct {
	// RunID identifies this attempt; every Execute draws a fresh one.
	RunID string `json:"run_id"`
	// ProcessorName is "p_" + the processor's Name().
	ProcessorName string `json:"processor_name"`
	// SubjectID is what the run was about (an underwriting id, in the underwriting pipeline).
	SubjectID string `json:"subject_id"`
	// ExtractionOutput is what Extract returned; empty on failure.
	ExtractionOutput Extraction `json:"extraction_output"`
	// Success is true when every step succeeded.
	Success bool `json:"success"`
	// Context is the run's lineage and metadata.
	Context ExecutionContext `json:"context"`
	// Error describes the failing step; nil on success.
	Error *StepError `json:"error,omitempty"`
	// Timestamp is when the attempt started.
	Timestamp time.Time `json:"timestamp"`
	// DurationMS is the attempt's duration in milliseconds, from start to
	// completion or failure, before the run record was saved.
	DurationMS int64 `json:"duration"`

	// err is the failing step's error, with its chain, for Err.
	err error
}

// StepError is the structured description of a failed step.
type StepError struct {
	// Step is the step that failed.
	Step Step `json:"step"`
	// Exception names the error's type, e.g. "*steps.DependencyNotFoundError",
	// looking through fmt.Errorf wrappers; "panic" for a recovered panic.
	Exception string `json:"exception"`
	// Message is the error's text.
	Message string `json:"message"`
	// Payload is the value the failing step was given: the input items for
	// dependency and validation, the validated data for processing, the
	// processed data for extraction. A value that does not encode to JSON is
	// replaced by a string naming its type, so that a Result always encodes.
	Payload any `json:"payload"`
}

// Err returns nil for a successful result. For a failed one it returns an
// error matching ErrStepFailed and, in the process that ran the step, the
// step's own error chain too (errors.Is/As see e.g. ErrDependencyNotFound or
// a processor's validation error). A decoded Result only has the message.
func (r *Result) Err() error {
	switch {
	case r == nil || r.Success:
		return nil
	case r.err != nil:
		return r.err
	case r.Error != nil:
		return fmt.Errorf("%w: %s %s: %s: %s", ErrStepFailed, r.ProcessorName, r.Error.Step, r.Error.Exception, r.Error.Message)
	default:
		return fmt.Errorf("%w: %s", ErrStepFailed, r.ProcessorName)
	}
}

// resultJSON has Result's fields without its methods.
type resultJSON Result

// MarshalJSON encodes r with "kind": "result", so DecodeInput can tell it
// from a Stipulation.
func (r Result) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Kind string `json:"kind"`
		resultJSON
	}{KindResult, resultJSON(r)})
}

// UnmarshalJSON decodes what MarshalJSON wrote. A "kind" other than "result"
// is an error wrapping ErrUnknownInput; a missing one is accepted.
func (r *Result) UnmarshalJSON(data []byte) error {
	var v struct {
		Kind string `json:"kind"`
		resultJSON
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return fmt.Errorf("steps: decode result: %w", err)
	}
	if err := checkKind(v.Kind, KindResult); err != nil {
		return err
	}
	*r = Result(v.resultJSON)
	return nil
}
