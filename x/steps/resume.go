package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
)

// plan is where a run starts and what it starts with.
type plan struct {
	start Step
	// why explains the choice, for logs.
	why string
	// processed and raw are the previous attempt's processing output, decoded
	// and as stored, when start is StepExtraction.
	processed any
	raw       []byte
}

// plan decides where a run with inputs hashing to hash starts, given the
// latest recorded attempt (nil if none): the step pipeline's resume table.
func (r *Runner) plan(ctx context.Context, prev *RunRecord, hash string) plan {
	full := func(why string) plan { return plan{start: StepDependency, why: why} }
	switch {
	case prev == nil:
		return full("no previous run")
	case prev.Success:
		return full("previous run succeeded")
	case hash == "" || prev.InputHash != hash:
		return full("inputs changed")
	}
	switch prev.FailedStep {
	case StepValidation, StepProcessing:
		// A processing failure resumes at validation: whatever processing
		// started from is validated again rather than trusted.
		return plan{start: StepValidation, why: "previous run failed at " + string(prev.FailedStep)}
	case StepExtraction:
		raw, processed, err := r.loadProcessed(ctx, prev.RunID)
		if err != nil {
			r.logger.LogAttrs(ctx, slog.LevelWarn, "cannot resume at extraction",
				slog.String("previous_run_id", prev.RunID), slog.Any("error", err))
			return full("processing output unavailable")
		}
		return plan{start: StepExtraction, why: "previous run failed at extraction", processed: processed, raw: raw}
	case StepDependency:
		return full("previous run failed at dependency")
	default:
		return full(fmt.Sprintf("previous run failed at unknown step %q", prev.FailedStep))
	}
}

// loadProcessed reads and decodes the processing output of run runID.
func (r *Runner) loadProcessed(ctx context.Context, runID string) (raw []byte, processed any, err error) {
	raw, err = r.store.StepOutput(ctx, runID, StepProcessing)
	if err != nil {
		return nil, nil, err
	}
	processed, err = guard(func() (any, error) {
		if d, ok := r.p.(ProcessedDecoder); ok {
			return d.DecodeProcessed(raw)
		}
		var v any
		return v, json.Unmarshal(raw, &v)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("steps: decode processing output of run %s: %w", runID, err)
	}
	return raw, processed, nil
}

// latestRun returns the latest recorded attempt for subjectID, or nil. A
// store error is logged and treated as no record: a full run is always safe,
// only the lineage restarts.
func (r *Runner) latestRun(ctx context.Context, subjectID string) *RunRecord {
	rec, err := r.store.LatestRun(ctx, r.name, subjectID)
	switch {
	case err == nil:
		return rec
	case !errors.Is(err, ErrNotFound):
		r.logger.LogAttrs(ctx, slog.LevelWarn, "cannot read latest run; running in full",
			slog.String("subject_id", subjectID), slog.Any("error", err))
	}
	return nil
}
