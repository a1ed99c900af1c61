package steps

import "maps"

// Keys the Runner sets in ExecutionContext.Metadata.
const (
	// MetaInputHash holds the run's InputHash ("" when the inputs could not
	// be hashed, which rules out resuming).
	MetaInputHash = "input_hash"
	// MetaResumeStep holds the step the run started at: "dependency" for a
	// full run, a later step when it resumed a failed attempt.
	MetaResumeStep = "resume_step"
)

// ExecutionContext is a run's retry lineage and metadata.
type ExecutionContext struct {
	// ParentRunID is the run id of the first attempt of the retry chain; a
	// first attempt is its own parent.
	ParentRunID string `json:"parent_run_id,omitempty"`
	// PreviousRunID is the immediately preceding attempt; empty on a first
	// attempt.
	PreviousRunID string `json:"previous_run_id,omitempty"`
	// LastErrorStep is the step that failed: in a failed Result, this run's;
	// otherwise the previous attempt's, empty on a first attempt.
	LastErrorStep Step `json:"last_error_step,omitempty"`
	// RetryCount is 0 on a first attempt and N on the Nth retry.
	RetryCount int `json:"retry_count"`
	// Metadata is arbitrary key/value data, carried along a retry chain and
	// shallow-merged from a context passed to Execute. Values must encode to
	// JSON; after a round trip through a RunStore numbers are float64.
	Metadata map[string]any `json:"metadata,omitempty"`
}

// lineage builds the context of run runID from the latest recorded attempt
// (nil if none) and the context the caller passed (nil if none).
//
// After a failure the chain continues; after a success, or with no record, a
// new chain starts with this run as its parent. A caller context whose
// ParentRunID is set replaces the lineage fields as a whole (the
// pipeline's merge rule); its Metadata is always merged over the carried metadata.
func lineage(runID string, prev *RunRecord, ec *ExecutionContext) ExecutionContext {
	c := ExecutionContext{ParentRunID: runID, Metadata: map[string]any{}}
	if prev != nil && !prev.Success {
		c.ParentRunID = prev.Context.ParentRunID
		if c.ParentRunID == "" {
			c.ParentRunID = prev.RunID
		}
		c.PreviousRunID = prev.RunID
		c.LastErrorStep = prev.FailedStep
		c.RetryCount = prev.Context.RetryCount + 1
		maps.Copy(c.Metadata, prev.Context.Metadata)
	}
	if ec != nil {
		if ec.ParentRunID != "" {
			c.ParentRunID = ec.ParentRunID
			c.PreviousRunID = ec.PreviousRunID
			c.LastErrorStep = ec.LastErrorStep
			c.RetryCount = ec.RetryCount
		}
		maps.Copy(c.Metadata, ec.Metadata)
	}
	return c
}
