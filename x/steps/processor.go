package steps

import "context"

// Processor is the business part of a pipeline: what it needs and what it
// does with it. A Runner adds the dependency check, error handling, lineage,
// persistence and resume.
//
// A Runner may call a Processor's methods from many goroutines at once, so
// implementations must be safe for concurrent use. Validate, Process and
// Extract must be idempotent (safe to run again on the same data): a retry
// reruns them, and a crash can repeat them. They receive the run's context
// and should return when it is done.
type Processor interface {
	// Name is the processor's name without the "p_" prefix, e.g.
	// "clear_business_report"; results carry "p_"+Name(). It must not be blank.
	Name() string
	// Required lists the dependencies that must be among the inputs: "p_x"
	// for the result of processor x, "s_x" for stipulation x. Other names are
	// ignored; at least one valid name is needed.
	Required() []string
	// Optional lists dependencies that may be among the inputs; when present,
	// they must belong to the run's subject.
	Optional() []string
	// Validate checks the inputs and returns the validated (normalised) data
	// handed to Process. Return a domain error that says what is wrong.
	Validate(ctx context.Context, in Inputs) (any, error)
	// Process performs the business transformation of the validated data.
	// Its output must encode to JSON (encoding/json) for a failed extraction
	// to be resumable; see ProcessedDecoder.
	Process(ctx context.Context, validated any) (any, error)
	// Extract builds the run's output from the processed data. It must not
	// persist anything: persistence happens after it returns.
	Extract(ctx context.Context, processed any) (Extraction, error)
}

// ProcessedDecoder is implemented by a Processor whose Process output is a
// custom type. When a run resumes at extraction, the Runner reads the
// processing output persisted as JSON by the failed attempt and passes it to
// DecodeProcessed, handing the result to Extract. Without it, the output is
// decoded into an any (maps, slices, float64, string, bool, nil), and Extract
// must accept that form as well as Process's own.
type ProcessedDecoder interface {
	DecodeProcessed(raw []byte) (any, error)
}

// Extraction is the output of a successful run, keyed by section. Its usual
// shape is "payload" (the processed data, if needed for auditing),
// "stipulations", "flags", "factors" and "metadata"; other keys may be added.
// Values must encode to JSON.
type Extraction map[string]any
