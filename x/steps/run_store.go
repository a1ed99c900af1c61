package steps

import (
	"context"
	"time"
)

// RunRecord is what a RunStore keeps of one attempt: enough to continue its
// lineage and decide whether the next attempt may resume.
type RunRecord struct {
	RunID     string `json:"run_id"`
	Processor string `json:"processor"`
	SubjectID string `json:"subject_id"`
	// InputHash is the attempt's InputHash; empty if it could not be computed.
	InputHash string `json:"input_hash"`
	Success   bool   `json:"success"`
	// FailedStep is the step that failed; empty on success.
	FailedStep Step             `json:"failed_step,omitempty"`
	Context    ExecutionContext `json:"context"`
	Timestamp  time.Time        `json:"timestamp"`
	DurationMS int64            `json:"duration"`
}

// RunStore persists run records and step outputs so that lineage and resume
// survive a worker restart and work across replicas.
//
// Implementations must be safe for concurrent use. They must not retain or
// modify the records and byte slices they are given, and the caller owns
// what they return. Processor names, subject ids and run ids are arbitrary
// non-empty strings (a subject id may hold dots, slashes, spaces or
// wildcards): an implementation with a restricted key alphabet must encode
// them. The storetest package holds the conformance suite every
// implementation must pass.
//
// The Runner does not serialise concurrent Execute calls for one (processor,
// subject): the last SaveRun wins. Callers that run the same subject on many
// workers at once should serialise per subject (e.g. with a batch key).
// Step outputs are never deleted by the Runner; a store may expire them
// (e.g. with a TTL), which only turns a later resume into a full rerun.
type RunStore interface {
	// LatestRun returns the record last saved for (processor, subjectID), or
	// an error wrapping ErrNotFound if there is none.
	LatestRun(ctx context.Context, processor, subjectID string) (*RunRecord, error)
	// SaveRun records rec as the latest attempt for (rec.Processor,
	// rec.SubjectID), replacing the previous one.
	SaveRun(ctx context.Context, rec *RunRecord) error
	// SaveStepOutput stores the JSON output of step in run runID, replacing
	// any earlier one.
	SaveStepOutput(ctx context.Context, runID string, step Step, data []byte) error
	// StepOutput returns what SaveStepOutput stored for (runID, step), or an
	// error wrapping ErrNotFound.
	StepOutput(ctx context.Context, runID string, step Step) ([]byte, error)
}
