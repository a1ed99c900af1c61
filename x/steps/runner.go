package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Runner executes a Processor as the dependency → validation → processing →
// extraction pipeline, recording every attempt in a RunStore. It is safe for
// concurrent use if its Processor and RunStore are.
type Runner struct {
	p        Processor
	name     string
	required []string
	optional []string
	store    RunStore
	logger   *slog.Logger
	now      func() time.Time
	runs     [len(order)]atomic.Int64
}

// New checks p's declaration and returns a Runner for it that records runs
// in store. It returns an error wrapping ErrImplementation if p is nil, its
// Name is blank, or none of its Required names starts with "p_" or "s_"; and
// ErrNilStore if store is nil.
func New(p Processor, store RunStore, opts ...Option) (*Runner, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: processor is nil", ErrImplementation)
	}
	name := p.Name()
	if strings.TrimSpace(name) == "" {
		return nil, fmt.Errorf("%w: processor %T: Name() is blank; it must name the processor, e.g. \"bank_statement\"", ErrImplementation, p)
	}
	required := dependencies(p.Required())
	if len(required) == 0 {
		return nil, fmt.Errorf("%w: processor %q: Required() lists no dependency starting with \"p_\" or \"s_\" (got %q)",
			ErrImplementation, name, p.Required())
	}
	if store == nil {
		return nil, fmt.Errorf("%w: processor %q", ErrNilStore, name)
	}
	r := &Runner{
		p:        p,
		name:     "p_" + name,
		required: required,
		optional: dependencies(p.Optional()),
		store:    store,
		logger:   slog.New(slog.DiscardHandler),
		now:      time.Now,
	}
	for _, o := range opts {
		o(r)
	}
	r.logger = r.logger.With(slog.String("processor", r.name))
	return r, nil
}

// dependencies keeps the names starting with "p_" or "s_", once each, in
// order.
func dependencies(names []string) []string {
	var out []string
	for _, n := range names {
		if (strings.HasPrefix(n, "p_") || strings.HasPrefix(n, "s_")) && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// Name returns the processor name results carry: "p_" + Processor.Name().
func (r *Runner) Name() string { return r.name }

// Required returns the processor's required dependencies, filtered.
func (r *Runner) Required() []string { return slices.Clone(r.required) }

// Optional returns the processor's optional dependencies, filtered.
func (r *Runner) Optional() []string { return slices.Clone(r.optional) }

// Runs returns how many times this Runner has started step, failed or not.
// Skipped steps, and steps not started because the context was done, are not
// counted.
func (r *Runner) Runs(step Step) int64 {
	if i := step.index(); i >= 0 {
		return r.runs[i].Load()
	}
	return 0
}

// Execute runs one attempt of the processor for subjectID over inputs and
// returns its Result; it never returns nil, never panics, and reports every
// failure, including a panic in a step, in the Result.
//
// The lineage continues from the latest attempt recorded for (processor,
// subjectID); ec, which may be nil, is merged into it: a set ParentRunID
// replaces the lineage, Metadata is merged over it. The resume point is
// decided from the recorded attempt alone, never from ec, so a caller
// cannot make the Runner skip a step whose success was not recorded.
//
// A canceled ctx fails the next step to start with ctx.Err(); a retry with
// the same inputs then resumes there. The attempt is recorded before Execute
// returns; a store error does not change the Result (it is logged, and only
// costs the next attempt its resume or lineage).
func (r *Runner) Execute(ctx context.Context, subjectID string, inputs []Input, ec *ExecutionContext) (res *Result) {
	start := r.now()
	res = &Result{
		RunID:            uuid.NewString(),
		ProcessorName:    r.name,
		SubjectID:        subjectID,
		ExtractionOutput: Extraction{},
		Timestamp:        start,
	}
	step := StepDependency
	defer func() {
		// Processor code is guarded step by step; this catches the rest
		// (a panicking RunStore, a bug here) to keep the no-panic promise.
		if v := recover(); v != nil {
			r.fail(ctx, res, step, &PanicError{Value: v, Stack: debug.Stack()}, nil)
			res.DurationMS = r.now().Sub(start).Milliseconds()
		}
	}()

	if subjectID == "" {
		res.Context = lineage(res.RunID, nil, ec)
		r.fail(ctx, res, StepDependency, fmt.Errorf("%w: %s cannot match dependencies without one", ErrEmptySubject, r.name), inputs)
		res.DurationMS = r.now().Sub(start).Milliseconds()
		return res
	}

	hash, err := InputHash(inputs)
	if err != nil {
		r.logger.LogAttrs(ctx, slog.LevelWarn, "cannot hash inputs; this run cannot be resumed",
			slog.String("subject_id", subjectID), slog.String("run_id", res.RunID), slog.Any("error", err))
	}
	prev := r.latestRun(ctx, subjectID)
	res.Context = lineage(res.RunID, prev, ec)
	pl := r.plan(ctx, prev, hash)
	res.Context.Metadata[MetaInputHash] = hash
	res.Context.Metadata[MetaResumeStep] = string(pl.start)
	if pl.start != StepDependency {
		r.logger.LogAttrs(ctx, slog.LevelInfo, "resuming",
			slog.String("subject_id", subjectID), slog.String("run_id", res.RunID),
			slog.String("step", string(pl.start)), slog.String("reason", pl.why))
	}

	in := Inputs{SubjectID: subjectID, Items: inputs}
	var cur any = inputs
	if pl.start == StepExtraction {
		cur = pl.processed
	}
	for _, step = range order[pl.start.index():] {
		next, err := r.runStep(ctx, step, res, in, cur)
		if err != nil {
			// The outcome is recorded even when ctx's cancellation is what
			// failed the step: the next attempt needs it to resume.
			ctx := context.WithoutCancel(ctx)
			if step == StepExtraction {
				r.saveProcessed(ctx, res, pl.raw, cur)
			}
			r.fail(ctx, res, step, err, cur)
			res.DurationMS = r.now().Sub(start).Milliseconds()
			r.saveRun(ctx, res, hash)
			return res
		}
		cur = next
	}

	res.Success = true
	res.ExtractionOutput = cur.(Extraction)
	res.DurationMS = r.now().Sub(start).Milliseconds()
	r.saveRun(context.WithoutCancel(ctx), res, hash)
	return res
}

// runStep runs one step on cur, the previous step's output, counting it.
func (r *Runner) runStep(ctx context.Context, step Step, res *Result, in Inputs, cur any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.runs[step.index()].Add(1)
	switch step {
	case StepDependency:
		return in.Items, r.checkDependencies(res.RunID, in)
	case StepValidation:
		return guard(func() (any, error) { return r.p.Validate(ctx, in) })
	case StepProcessing:
		return guard(func() (any, error) { return r.p.Process(ctx, cur) })
	default:
		return guard(func() (any, error) {
			out, err := r.p.Extract(ctx, cur)
			if out == nil {
				out = Extraction{}
			}
			return out, err
		})
	}
}

// checkDependencies is the dependency step: every required dependency among
// the items, and no declared one belonging to another subject.
func (r *Runner) checkDependencies(runID string, in Inputs) error {
	type id struct{ name, subject string }
	ids := make([]id, 0, len(in.Items))
	for _, it := range in.Items {
		switch v := it.(type) {
		case Stipulation:
			ids = append(ids, id{v.Name, v.SubjectID})
		case *Stipulation:
			if v != nil {
				ids = append(ids, id{v.Name, v.SubjectID})
			}
		case Result:
			ids = append(ids, id{v.ProcessorName, v.SubjectID})
		case *Result:
			if v != nil {
				ids = append(ids, id{v.ProcessorName, v.SubjectID})
			}
		}
	}
	for _, dep := range r.required {
		if !slices.ContainsFunc(ids, func(i id) bool { return i.name == dep }) {
			return &DependencyNotFoundError{RunID: runID, Processor: r.name, SubjectID: in.SubjectID, Dependency: dep}
		}
	}
	for _, dep := range slices.Concat(r.required, r.optional) {
		for _, i := range ids {
			if i.name == dep && i.subject != in.SubjectID {
				return &DependencyMismatchError{RunID: runID, Processor: r.name, SubjectID: in.SubjectID,
					Dependency: dep, InputSubjectID: i.subject}
			}
		}
	}
	return nil
}

// guard runs f, turning a panic into a *PanicError.
func guard(f func() (any, error)) (v any, err error) {
	defer func() {
		if p := recover(); p != nil {
			v, err = nil, &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return f()
}

// fail marks res as failed at step with err; payload is what the step was given.
func (r *Runner) fail(ctx context.Context, res *Result, step Step, err error, payload any) {
	res.Success = false
	res.ExtractionOutput = Extraction{}
	res.Context.LastErrorStep = step
	if _, jerr := json.Marshal(payload); jerr != nil {
		// A Result must always encode: it travels to the next processor.
		payload = fmt.Sprintf("%T (not JSON-encodable: %v)", payload, jerr)
	}
	res.Error = &StepError{Step: step, Exception: exceptionName(err), Message: err.Error(), Payload: payload}
	res.err = fmt.Errorf("%w: %s %s: %w", ErrStepFailed, r.name, step, err)
	r.logger.LogAttrs(ctx, slog.LevelError, "step failed",
		slog.String("subject_id", res.SubjectID), slog.String("run_id", res.RunID),
		slog.String("step", string(step)), slog.String("exception", res.Error.Exception), slog.Any("error", err))
}

// exceptionName names err's type, looking through fmt.Errorf wrappers of a
// single error, which say nothing about what went wrong.
func exceptionName(err error) string {
	if _, ok := errors.AsType[*PanicError](err); ok {
		return "panic"
	}
	for {
		name := fmt.Sprintf("%T", err)
		next := errors.Unwrap(err)
		if name != "*fmt.wrapError" || next == nil {
			return name
		}
		err = next
	}
}

// saveProcessed persists the processing output of res's run after its
// extraction failed, so that a retry can resume at extraction: raw as read
// back when this run itself resumed there, else processed encoded now. It is
// written before the run record, so a record of an extraction failure
// implies the output, unless this write failed.
func (r *Runner) saveProcessed(ctx context.Context, res *Result, raw []byte, processed any) {
	if raw == nil {
		var err error
		if raw, err = json.Marshal(processed); err != nil {
			r.logger.LogAttrs(ctx, slog.LevelWarn, "processing output does not encode to JSON; a retry will run in full",
				slog.String("subject_id", res.SubjectID), slog.String("run_id", res.RunID), slog.Any("error", err))
			return
		}
	}
	if err := r.store.SaveStepOutput(ctx, res.RunID, StepProcessing, raw); err != nil {
		r.logger.LogAttrs(ctx, slog.LevelWarn, "cannot save processing output; a retry will run in full",
			slog.String("subject_id", res.SubjectID), slog.String("run_id", res.RunID), slog.Any("error", err))
	}
}

// saveRun records res as the latest attempt for its subject.
func (r *Runner) saveRun(ctx context.Context, res *Result, hash string) {
	rec := &RunRecord{
		RunID:      res.RunID,
		Processor:  r.name,
		SubjectID:  res.SubjectID,
		InputHash:  hash,
		Success:    res.Success,
		Context:    res.Context,
		Timestamp:  res.Timestamp,
		DurationMS: res.DurationMS,
	}
	if res.Error != nil {
		rec.FailedStep = res.Error.Step
	}
	if err := r.store.SaveRun(ctx, rec); err != nil {
		r.logger.LogAttrs(ctx, slog.LevelWarn, "cannot record run; the next attempt loses its lineage or resume",
			slog.String("subject_id", res.SubjectID), slog.String("run_id", res.RunID), slog.Any("error", err))
	}
}
