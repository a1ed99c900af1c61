package steps_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/tickflow/tickflow/x/steps"
)

// noOutputs is a RunStore that has lost every step output, as after a TTL
// expired them.
type noOutputs struct{ steps.RunStore }

func (noOutputs) StepOutput(_ context.Context, runID string, step steps.Step) ([]byte, error) {
	return nil, steps.ErrNotFound
}

// TestResumeTable seeds the store with the record of a previous attempt and
// checks where the next attempt starts and which steps it runs: the step
// pipeline's resume table, row by row.
func TestResumeTable(t *testing.T) {
	inputs := []steps.Input{doc(subject, "hello world")}
	hash, err := steps.InputHash(inputs)
	if err != nil {
		t.Fatal(err)
	}
	const changed = "0000000000000000000000000000000000000000000000000000000000000000"
	all := []steps.Step{steps.StepDependency, steps.StepValidation, steps.StepProcessing, steps.StepExtraction}
	fromValidation := all[1:]
	onlyExtraction := all[3:]

	tests := []struct {
		name       string
		prev       *steps.RunRecord // nil: no previous attempt
		output     string           // persisted processing output of the previous attempt; "" for none
		dropOutput bool             // the store lost its step outputs
		wantStart  steps.Step
		wantRan    []steps.Step
	}{
		{name: "no previous run", wantStart: steps.StepDependency, wantRan: all},
		{name: "previous success, same hash", prev: &steps.RunRecord{InputHash: hash, Success: true},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "previous success, changed hash", prev: &steps.RunRecord{InputHash: changed, Success: true},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "dependency failure, same hash", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepDependency},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "dependency failure, changed hash", prev: &steps.RunRecord{InputHash: changed, FailedStep: steps.StepDependency},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "validation failure, same hash", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepValidation},
			wantStart: steps.StepValidation, wantRan: fromValidation},
		{name: "validation failure, changed hash", prev: &steps.RunRecord{InputHash: changed, FailedStep: steps.StepValidation},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "validation failure, same hash, outputs lost (none needed)", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepValidation},
			dropOutput: true, wantStart: steps.StepValidation, wantRan: fromValidation},
		{name: "processing failure, same hash", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepProcessing},
			wantStart: steps.StepValidation, wantRan: fromValidation},
		{name: "processing failure, changed hash", prev: &steps.RunRecord{InputHash: changed, FailedStep: steps.StepProcessing},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "processing failure, same hash, outputs lost (none needed)", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepProcessing},
			dropOutput: true, wantStart: steps.StepValidation, wantRan: fromValidation},
		{name: "extraction failure, same hash", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepExtraction},
			output: `{"total":7,"label":"persisted"}`, wantStart: steps.StepExtraction, wantRan: onlyExtraction},
		{name: "extraction failure, changed hash", prev: &steps.RunRecord{InputHash: changed, FailedStep: steps.StepExtraction},
			output: `{"total":7,"label":"persisted"}`, wantStart: steps.StepDependency, wantRan: all},
		{name: "extraction failure, same hash, output missing", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepExtraction},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "extraction failure, same hash, outputs lost", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepExtraction},
			output: `{"total":7,"label":"persisted"}`, dropOutput: true, wantStart: steps.StepDependency, wantRan: all},
		{name: "extraction failure, same hash, output undecodable", prev: &steps.RunRecord{InputHash: hash, FailedStep: steps.StepExtraction},
			output: `["not","a","processed"]`, wantStart: steps.StepDependency, wantRan: all},
		{name: "unknown step, same hash", prev: &steps.RunRecord{InputHash: hash, FailedStep: "transmogrification"},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "failure without a step, same hash", prev: &steps.RunRecord{InputHash: hash},
			wantStart: steps.StepDependency, wantRan: all},
		{name: "previous inputs could not be hashed", prev: &steps.RunRecord{InputHash: "", FailedStep: steps.StepExtraction},
			output: `{"total":7,"label":"persisted"}`, wantStart: steps.StepDependency, wantRan: all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := steps.NewMemoryStore()
			var store steps.RunStore = mem
			if tt.dropOutput {
				store = noOutputs{mem}
			}
			if tt.prev != nil {
				prev := *tt.prev
				prev.RunID, prev.Processor, prev.SubjectID = "prev-run", "p_test", subject
				prev.Context = steps.ExecutionContext{ParentRunID: "root-run", PreviousRunID: "older-run", RetryCount: 3}
				prev.Timestamp = time.Now()
				if err := mem.SaveRun(t.Context(), &prev); err != nil {
					t.Fatal(err)
				}
			}
			if tt.output != "" {
				if err := mem.SaveStepOutput(t.Context(), "prev-run", steps.StepProcessing, []byte(tt.output)); err != nil {
					t.Fatal(err)
				}
			}
			p := newDecoding()
			r := newRunner(t, p, store)

			res := r.Execute(t.Context(), subject, inputs, nil)

			if !res.Success {
				t.Fatalf("Execute failed: %v", res.Err())
			}
			if got := res.Context.Metadata[steps.MetaResumeStep]; got != string(tt.wantStart) {
				t.Errorf("resume step = %v, want %s", got, tt.wantStart)
			}
			var ran []steps.Step
			for _, s := range all {
				if r.Runs(s) > 0 {
					ran = append(ran, s)
				}
			}
			if !reflect.DeepEqual(ran, tt.wantRan) {
				t.Errorf("ran %v, want %v", ran, tt.wantRan)
			}
			var wantCounts [3]int64
			for _, s := range tt.wantRan[max(0, len(tt.wantRan)-3):] {
				wantCounts[indexOf(s)] = 1
			}
			if got := p.counts(); got != wantCounts {
				t.Errorf("processor validation, processing, extraction runs = %v, want %v", got, wantCounts)
			}
			if tt.wantStart == steps.StepExtraction {
				// Extraction worked from the persisted output, decoded by the hook.
				if got := res.ExtractionOutput["payload"].(map[string]any)["label"]; got != "persisted" {
					t.Errorf("payload label = %v, want persisted", got)
				}
				if got := p.extractedType.Load(); got != "steps_test.processed" {
					t.Errorf("Extract received %v, want steps_test.processed", got)
				}
			}
			wantParent, wantPrev, wantRetry := res.RunID, "", 0
			if tt.prev != nil && !tt.prev.Success {
				wantParent, wantPrev, wantRetry = "root-run", "prev-run", 4
			}
			if c := res.Context; c.ParentRunID != wantParent || c.PreviousRunID != wantPrev || c.RetryCount != wantRetry {
				t.Errorf("lineage = %+v, want parent %s, previous %q, retry %d", c, wantParent, wantPrev, wantRetry)
			}
		})
	}
}

func indexOf(s steps.Step) int {
	switch s {
	case steps.StepValidation:
		return 0
	case steps.StepProcessing:
		return 1
	default:
		return 2
	}
}

// TestRetryAfterExtractionFailureRunsOnlyExtraction runs the failure and the
// retry end to end, on the same Runner and on a fresh one sharing the store
// (a worker restart, or another replica).
func TestRetryAfterExtractionFailureRunsOnlyExtraction(t *testing.T) {
	for _, fresh := range []bool{false, true} {
		name := "same runner"
		if fresh {
			name = "fresh runner on the same store"
		}
		t.Run(name, func(t *testing.T) {
			inputs := []steps.Input{doc(subject, "hello world")}
			want := newRunner(t, newDecoding(), steps.NewMemoryStore()).Execute(t.Context(), subject, inputs, nil)

			store := steps.NewMemoryStore()
			p := newDecoding()
			p.failAt(steps.StepExtraction, 2)
			r := newRunner(t, p, store)

			first := r.Execute(t.Context(), subject, inputs, nil)
			if first.Error == nil || first.Error.Step != steps.StepExtraction || !errors.Is(first.Err(), errInjected) {
				t.Fatalf("first attempt: Error = %+v, want the injected extraction failure", first.Error)
			}
			if first.Error.Exception != "*errors.errorString" {
				t.Errorf("Exception = %q", first.Error.Exception)
			}
			if !reflect.DeepEqual(first.Error.Payload, processed{Total: 110, Label: "1 items"}) {
				t.Errorf("Payload = %#v, want the processed value", first.Error.Payload)
			}
			if got := p.counts(); got != [3]int64{1, 1, 1} {
				t.Fatalf("first attempt runs = %v", got)
			}

			runner := r
			if fresh {
				p = newDecoding()
				p.failAt(steps.StepExtraction, 1)
				runner = newRunner(t, p, store)
			}
			before := p.counts()

			// Retry 1 fails at extraction again; retry 2 succeeds. Neither
			// validates nor processes: the output of the first attempt's
			// processing is carried from run to run.
			retry1 := runner.Execute(t.Context(), subject, inputs, nil)
			retry2 := runner.Execute(t.Context(), subject, inputs, nil)

			if retry1.Success || retry1.Error.Step != steps.StepExtraction {
				t.Fatalf("retry 1: %+v, want an extraction failure", retry1.Error)
			}
			if !retry2.Success {
				t.Fatalf("retry 2 failed: %v", retry2.Err())
			}
			got := p.counts()
			if got[0] != before[0] || got[1] != before[1] || got[2] != before[2]+2 {
				t.Errorf("runs before the retries %v, after %v: want only extraction, twice", before, got)
			}
			if fresh && (runner.Runs(steps.StepDependency) != 0 || runner.Runs(steps.StepValidation) != 0) {
				t.Errorf("fresh runner ran dependency %d, validation %d times; want 0", runner.Runs(steps.StepDependency), runner.Runs(steps.StepValidation))
			}
			for _, res := range []*steps.Result{retry1, retry2} {
				if res.Context.Metadata[steps.MetaResumeStep] != string(steps.StepExtraction) {
					t.Errorf("resume step = %v, want extraction", res.Context.Metadata[steps.MetaResumeStep])
				}
			}
			if c := retry2.Context; c.ParentRunID != first.RunID || c.PreviousRunID != retry1.RunID || c.RetryCount != 2 {
				t.Errorf("retry 2 lineage = %+v", c)
			}
			if !reflect.DeepEqual(retry2.ExtractionOutput, want.ExtractionOutput) {
				t.Errorf("resumed output = %v, want %v as from an uninterrupted run", retry2.ExtractionOutput, want.ExtractionOutput)
			}
		})
	}
}

func TestResumeWithoutDecoderHandsExtractAMap(t *testing.T) {
	store := steps.NewMemoryStore()
	p := newCounting()
	p.failAt(steps.StepExtraction, 1)
	r := newRunner(t, p, store)
	inputs := []steps.Input{doc(subject, "hello world")}

	r.Execute(t.Context(), subject, inputs, nil)
	res := r.Execute(t.Context(), subject, inputs, nil)

	if !res.Success || res.Context.Metadata[steps.MetaResumeStep] != string(steps.StepExtraction) {
		t.Fatalf("retry: success %v, resume step %v; want a resumed success (%v)", res.Success, res.Context.Metadata[steps.MetaResumeStep], res.Err())
	}
	if got := p.extractedType.Load(); got != "map[string]interface {}" {
		t.Errorf("Extract received %v, want map[string]interface {}", got)
	}
}

func TestRetryAfterProcessingFailureRevalidates(t *testing.T) {
	p := newCounting()
	p.failAt(steps.StepProcessing, 1)
	r := newRunner(t, p, steps.NewMemoryStore())
	inputs := []steps.Input{doc(subject, "hello world")}

	if res := r.Execute(t.Context(), subject, inputs, nil); res.Error == nil || res.Error.Step != steps.StepProcessing {
		t.Fatalf("first attempt: %+v, want a processing failure", res.Error)
	}
	res := r.Execute(t.Context(), subject, inputs, nil)
	if !res.Success {
		t.Fatalf("retry: %v", res.Err())
	}
	if r.Runs(steps.StepDependency) != 1 {
		t.Errorf("Runs(dependency) = %d, want 1: the retry skips it", r.Runs(steps.StepDependency))
	}
	if got := p.counts(); got != [3]int64{2, 2, 1} {
		t.Errorf("validation, processing, extraction runs = %v, want [2 2 1]", got)
	}
}

func TestRetryWithChangedInputsRunsInFull(t *testing.T) {
	p := newCounting()
	p.failAt(steps.StepExtraction, 1)
	r := newRunner(t, p, steps.NewMemoryStore())

	r.Execute(t.Context(), subject, []steps.Input{doc(subject, "v1")}, nil)
	res := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "v2")}, nil)

	if !res.Success || res.Context.Metadata[steps.MetaResumeStep] != string(steps.StepDependency) || res.Context.RetryCount != 1 {
		t.Fatalf("retry: success %v, context %+v; want a full run as retry 1", res.Success, res.Context)
	}
	if got := p.counts(); got != [3]int64{2, 2, 2} {
		t.Errorf("runs = %v, want every step twice", got)
	}
}

// cancelling cancels the run's context from inside Process, as a shutdown
// arriving mid-run would.
type cancelling struct {
	*countingProcessor
	cancel context.CancelFunc
}

func (c cancelling) Process(ctx context.Context, v any) (any, error) {
	out, err := c.countingProcessor.Process(ctx, v)
	c.cancel()
	return out, err
}

func TestCanceledRunResumesWhereItStopped(t *testing.T) {
	store := steps.NewMemoryStore()
	inputs := []steps.Input{doc(subject, "hello world")}
	ctx, cancel := context.WithCancel(t.Context())
	p := newCounting()
	r := newRunner(t, cancelling{p, cancel}, store)

	res := r.Execute(ctx, subject, inputs, nil)
	if res.Error == nil || res.Error.Step != steps.StepExtraction || !errors.Is(res.Err(), context.Canceled) {
		t.Fatalf("Error = %+v, want extraction to fail with context.Canceled", res.Error)
	}
	if r.Runs(steps.StepExtraction) != 0 || p.extractions.Load() != 0 {
		t.Errorf("extraction started %d times after cancellation", p.extractions.Load())
	}

	retry := newRunner(t, p, store).Execute(t.Context(), subject, inputs, nil)
	if !retry.Success || retry.Context.Metadata[steps.MetaResumeStep] != string(steps.StepExtraction) {
		t.Fatalf("retry: success %v, resume %v: %v", retry.Success, retry.Context.Metadata[steps.MetaResumeStep], retry.Err())
	}
	if got := p.counts(); got != [3]int64{1, 1, 1} {
		t.Errorf("runs = %v, want each step once overall", got)
	}
}

func TestUnhashableInputsRunInFull(t *testing.T) {
	p := newCounting()
	p.failAt(steps.StepExtraction, 1)
	r := newRunner(t, p, steps.NewMemoryStore())
	inputs := []steps.Input{doc(subject, "x"), make(chan int)}

	first := r.Execute(t.Context(), subject, inputs, nil)
	retry := r.Execute(t.Context(), subject, inputs, nil)

	if first.Context.Metadata[steps.MetaInputHash] != "" {
		t.Errorf("input hash = %v, want empty", first.Context.Metadata[steps.MetaInputHash])
	}
	if !retry.Success || retry.Context.Metadata[steps.MetaResumeStep] != string(steps.StepDependency) {
		t.Errorf("retry: success %v, resume step %v; want a full run", retry.Success, retry.Context.Metadata[steps.MetaResumeStep])
	}
}
