package steps_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/tickflow/tickflow/x/steps"
)

const subject = "UW-123"

func doc(subj, content string) steps.Stipulation {
	return steps.Stipulation{Name: "s_doc", SubjectID: subj, Content: []byte(content)}
}

func newRunner(t *testing.T, p steps.Processor, store steps.RunStore, opts ...steps.Option) *steps.Runner {
	t.Helper()
	r, err := steps.New(p, store, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// declared is a Processor whose declaration is set field by field.
type declared struct {
	*countingProcessor
	name               string
	required, optional []string
}

func (d declared) Name() string       { return d.name }
func (d declared) Required() []string { return d.required }
func (d declared) Optional() []string { return d.optional }

func TestNewRejectsBadDeclarations(t *testing.T) {
	tests := []struct {
		name    string
		p       steps.Processor
		store   steps.RunStore
		wantErr error
	}{
		{"nil processor", nil, steps.NewMemoryStore(), steps.ErrImplementation},
		{"empty name", declared{newCounting(), "", []string{"s_doc"}, nil}, steps.NewMemoryStore(), steps.ErrImplementation},
		{"blank name", declared{newCounting(), " \t", []string{"s_doc"}, nil}, steps.NewMemoryStore(), steps.ErrImplementation},
		{"no required", declared{newCounting(), "x", nil, []string{"s_doc"}}, steps.NewMemoryStore(), steps.ErrImplementation},
		{"no valid required", declared{newCounting(), "x", []string{"doc", "x_doc", "P_doc", ""}, nil}, steps.NewMemoryStore(), steps.ErrImplementation},
		{"nil store", newCounting(), nil, steps.ErrNilStore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := steps.New(tt.p, tt.store)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("New: err = %v, want %v", err, tt.wantErr)
			}
			if r != nil {
				t.Fatalf("New returned a Runner with error %v", err)
			}
		})
	}
}

func TestNewFiltersDependencies(t *testing.T) {
	p := declared{newCounting(), "report", []string{"p_form", "form", "s_doc", "p_form"}, []string{"p_bank", "bank", ""}}
	r := newRunner(t, p, steps.NewMemoryStore())
	if r.Name() != "p_report" {
		t.Errorf("Name() = %q, want p_report", r.Name())
	}
	if got, want := r.Required(), []string{"p_form", "s_doc"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Required() = %q, want %q", got, want)
	}
	if got, want := r.Optional(), []string{"p_bank"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Optional() = %q, want %q", got, want)
	}
}

// stepClock advances by 50ms at every reading.
type stepClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(50 * time.Millisecond)
	return t
}

func TestExecuteSuccess(t *testing.T) {
	start := time.Date(2025, 9, 3, 7, 13, 59, 0, time.UTC)
	p := newCounting()
	r := newRunner(t, p, steps.NewMemoryStore(), steps.WithClock((&stepClock{t: start}).now))

	res := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "hello world")}, nil)

	if !res.Success || res.Error != nil || res.Err() != nil {
		t.Fatalf("Success = %v, Error = %+v, Err() = %v; want success", res.Success, res.Error, res.Err())
	}
	if _, err := uuid.Parse(res.RunID); err != nil {
		t.Errorf("RunID %q is not a uuid: %v", res.RunID, err)
	}
	if res.ProcessorName != "p_test" || res.SubjectID != subject {
		t.Errorf("ProcessorName, SubjectID = %q, %q; want p_test, %s", res.ProcessorName, res.SubjectID, subject)
	}
	if !res.Timestamp.Equal(start) || res.DurationMS != 50 {
		t.Errorf("Timestamp, DurationMS = %v, %d; want %v, 50", res.Timestamp, res.DurationMS, start)
	}
	want := steps.Extraction{
		"payload":      map[string]any{"total": 110, "label": "1 items"},
		"stipulations": map[string]any{},
		"flags":        map[string]any{"large": true},
	}
	if !reflect.DeepEqual(res.ExtractionOutput, want) {
		t.Errorf("ExtractionOutput = %v, want %v", res.ExtractionOutput, want)
	}
	if got := p.counts(); got != [3]int64{1, 1, 1} {
		t.Errorf("validation, processing, extraction runs = %v, want 1 each", got)
	}
	for _, s := range []steps.Step{steps.StepDependency, steps.StepValidation, steps.StepProcessing, steps.StepExtraction} {
		if r.Runs(s) != 1 {
			t.Errorf("Runs(%s) = %d, want 1", s, r.Runs(s))
		}
	}
	if r.Runs("bogus") != 0 {
		t.Errorf("Runs(bogus) = %d, want 0", r.Runs("bogus"))
	}
}

func TestDependencyCheck(t *testing.T) {
	upstream := &steps.Result{ProcessorName: "p_upstream", SubjectID: subject, Success: true}
	other := &steps.Result{ProcessorName: "p_upstream", SubjectID: "UW-999", Success: true}
	d := doc(subject, "x")
	tests := []struct {
		name       string
		subject    string
		inputs     []steps.Input
		wantErr    error // nil: the dependency step passes
		wantDep    string
		wantOther  string
		wantExcept string
	}{
		{name: "required present", subject: subject, inputs: []steps.Input{d}},
		{name: "required present by pointer", subject: subject, inputs: []steps.Input{&d}},
		{name: "optional present", subject: subject, inputs: []steps.Input{d, upstream}},
		{name: "undeclared input of another subject is ignored", subject: subject,
			inputs: []steps.Input{d, steps.Stipulation{Name: "s_other", SubjectID: "UW-999"}}},
		{name: "no inputs", subject: subject, wantErr: steps.ErrDependencyNotFound, wantDep: "s_doc",
			wantExcept: "*steps.DependencyNotFoundError"},
		{name: "only the optional", subject: subject, inputs: []steps.Input{upstream}, wantErr: steps.ErrDependencyNotFound,
			wantDep: "s_doc", wantExcept: "*steps.DependencyNotFoundError"},
		{name: "other kinds do not count", subject: subject, inputs: []steps.Input{"s_doc", map[string]string{"name": "s_doc"}, nil},
			wantErr: steps.ErrDependencyNotFound, wantDep: "s_doc", wantExcept: "*steps.DependencyNotFoundError"},
		{name: "a result carrying the name satisfies it", subject: subject,
			inputs: []steps.Input{steps.Result{ProcessorName: "s_doc", SubjectID: subject}}},
		{name: "required of another subject", subject: subject, inputs: []steps.Input{doc("UW-999", "x")},
			wantErr: steps.ErrDependencyMismatch, wantDep: "s_doc", wantOther: "UW-999", wantExcept: "*steps.DependencyMismatchError"},
		{name: "one of two copies of another subject", subject: subject, inputs: []steps.Input{d, doc("UW-999", "x")},
			wantErr: steps.ErrDependencyMismatch, wantDep: "s_doc", wantOther: "UW-999", wantExcept: "*steps.DependencyMismatchError"},
		{name: "optional of another subject", subject: subject, inputs: []steps.Input{d, other},
			wantErr: steps.ErrDependencyMismatch, wantDep: "p_upstream", wantOther: "UW-999", wantExcept: "*steps.DependencyMismatchError"},
		{name: "empty subject", subject: "", inputs: []steps.Input{doc("", "x")}, wantErr: steps.ErrEmptySubject,
			wantExcept: "*errors.errorString"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newCounting()
			r := newRunner(t, p, steps.NewMemoryStore())
			res := r.Execute(t.Context(), tt.subject, tt.inputs, nil)
			if tt.wantErr == nil {
				if res.Error != nil && res.Error.Step == steps.StepDependency {
					t.Fatalf("dependency step failed: %v", res.Err())
				}
				return
			}
			if res.Success || res.Error == nil || res.Error.Step != steps.StepDependency {
				t.Fatalf("Success = %v, Error = %+v; want a dependency failure", res.Success, res.Error)
			}
			if !errors.Is(res.Err(), tt.wantErr) || !errors.Is(res.Err(), steps.ErrStepFailed) {
				t.Errorf("Err() = %v, want it to match %v and ErrStepFailed", res.Err(), tt.wantErr)
			}
			if tt.wantExcept != "" && res.Error.Exception != tt.wantExcept {
				t.Errorf("Exception = %q, want %q", res.Error.Exception, tt.wantExcept)
			}
			if !reflect.DeepEqual(res.Error.Payload, tt.inputs) {
				t.Errorf("Payload = %#v, want the inputs %#v", res.Error.Payload, tt.inputs)
			}
			if nf, ok := errors.AsType[*steps.DependencyNotFoundError](res.Err()); ok {
				want := steps.DependencyNotFoundError{RunID: res.RunID, Processor: "p_test", SubjectID: subject, Dependency: tt.wantDep}
				if *nf != want {
					t.Errorf("DependencyNotFoundError = %+v, want %+v", *nf, want)
				}
			}
			if mm, ok := errors.AsType[*steps.DependencyMismatchError](res.Err()); ok {
				want := steps.DependencyMismatchError{RunID: res.RunID, Processor: "p_test", SubjectID: subject,
					Dependency: tt.wantDep, InputSubjectID: tt.wantOther}
				if *mm != want {
					t.Errorf("DependencyMismatchError = %+v, want %+v", *mm, want)
				}
			}
			if got := p.counts(); got != [3]int64{} {
				t.Errorf("validation, processing, extraction runs = %v, want none", got)
			}
		})
	}
}

func TestPanicIsolation(t *testing.T) {
	for _, step := range []steps.Step{steps.StepValidation, steps.StepProcessing, steps.StepExtraction} {
		t.Run(string(step), func(t *testing.T) {
			p := newCounting()
			p.panicOn(step)
			r := newRunner(t, p, steps.NewMemoryStore())
			res := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "x")}, nil)
			if res.Success || res.Error == nil {
				t.Fatalf("Success = %v, Error = %v; want a failure", res.Success, res.Error)
			}
			if res.Error.Step != step || res.Error.Exception != "panic" || res.Error.Message != "steps: panic: "+string(step)+" exploded" {
				t.Errorf("Error = %+v, want step %s, exception panic", res.Error, step)
			}
			pe, ok := errors.AsType[*steps.PanicError](res.Err())
			if !ok || !errors.Is(res.Err(), steps.ErrPanic) || len(pe.Stack) == 0 {
				t.Errorf("Err() = %v, want a *PanicError with a stack, matching ErrPanic", res.Err())
			}
		})
	}
}

// panickyStore panics on every call.
type panickyStore struct{ steps.RunStore }

func (panickyStore) LatestRun(context.Context, string, string) (*steps.RunRecord, error) {
	panic("store exploded")
}

func TestStorePanicDoesNotEscape(t *testing.T) {
	r := newRunner(t, newCounting(), panickyStore{})
	res := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "x")}, nil)
	if res.Success || res.Error == nil || res.Error.Exception != "panic" || res.Error.Step != steps.StepDependency {
		t.Fatalf("Result = %+v, want a panic failure at dependency", res)
	}
}

// failingStore fails every call.
type failingStore struct{}

var errStoreDown = errors.New("store down")

func (failingStore) LatestRun(context.Context, string, string) (*steps.RunRecord, error) {
	return nil, errStoreDown
}
func (failingStore) SaveRun(context.Context, *steps.RunRecord) error { return errStoreDown }
func (failingStore) SaveStepOutput(context.Context, string, steps.Step, []byte) error {
	return errStoreDown
}
func (failingStore) StepOutput(context.Context, string, steps.Step) ([]byte, error) {
	return nil, errStoreDown
}

func TestStoreErrorsDoNotChangeTheOutcome(t *testing.T) {
	p := newCounting()
	r := newRunner(t, p, failingStore{})
	res := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "x")}, nil)
	if !res.Success || res.Context.ParentRunID != res.RunID || res.Context.RetryCount != 0 {
		t.Fatalf("Result = %+v, want a successful first attempt", res)
	}
	p.failAt(steps.StepExtraction, 1)
	if res := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "x")}, nil); res.Error == nil || !errors.Is(res.Err(), errInjected) {
		t.Fatalf("Err() = %v, want the injected failure", res.Err())
	}
}

type customError struct{ field string }

func (e *customError) Error() string { return e.field + " is wrong" }

// wrapping fails validation with a custom error wrapped twice.
type wrapping struct{ *countingProcessor }

func (wrapping) Validate(context.Context, steps.Inputs) (any, error) {
	return nil, fmt.Errorf("validate: %w", fmt.Errorf("form: %w", &customError{"ein"}))
}

func TestExceptionNamesTheCause(t *testing.T) {
	r := newRunner(t, wrapping{newCounting()}, steps.NewMemoryStore())
	res := r.Execute(t.Context(), subject, []steps.Input{doc(subject, "x")}, nil)
	if res.Error == nil || res.Error.Exception != "*steps_test.customError" || res.Error.Message != "validate: form: ein is wrong" {
		t.Fatalf("Error = %+v, want exception *steps_test.customError", res.Error)
	}
	if _, ok := errors.AsType[*customError](res.Err()); !ok {
		t.Errorf("Err() = %v does not unwrap to *customError", res.Err())
	}
}

func TestConcurrentExecute(t *testing.T) {
	p := newCounting()
	r := newRunner(t, p, steps.NewMemoryStore())
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			subj := fmt.Sprint("UW-", i)
			for range 5 {
				if res := r.Execute(t.Context(), subj, []steps.Input{doc(subj, "x")}, nil); !res.Success {
					t.Errorf("%s: %v", subj, res.Err())
				}
			}
		})
	}
	wg.Wait()
	if got := r.Runs(steps.StepExtraction); got != 80 {
		t.Errorf("Runs(extraction) = %d, want 80", got)
	}
}
