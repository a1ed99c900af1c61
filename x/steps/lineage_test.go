package steps_test

import (
	"reflect"
	"testing"

	"github.com/tickflow/tickflow/x/steps"
)

func TestLineage(t *testing.T) {
	p := newCounting()
	p.failAt(steps.StepValidation, 2)
	r := newRunner(t, p, steps.NewMemoryStore())
	in := []steps.Input{doc(subject, "x")}

	first := r.Execute(t.Context(), subject, in, nil)
	retry1 := r.Execute(t.Context(), subject, in, nil)
	retry2 := r.Execute(t.Context(), subject, in, nil)
	after := r.Execute(t.Context(), subject, in, nil)

	tests := []struct {
		name        string
		res         *steps.Result
		wantSuccess bool
		want        steps.ExecutionContext
	}{
		{"first run", first, false,
			steps.ExecutionContext{ParentRunID: first.RunID, LastErrorStep: steps.StepValidation, RetryCount: 0}},
		{"retry 1", retry1, false,
			steps.ExecutionContext{ParentRunID: first.RunID, PreviousRunID: first.RunID, LastErrorStep: steps.StepValidation, RetryCount: 1}},
		{"retry 2 succeeds", retry2, true,
			steps.ExecutionContext{ParentRunID: first.RunID, PreviousRunID: retry1.RunID, LastErrorStep: steps.StepValidation, RetryCount: 2}},
		{"run after a success starts a new chain", after, true,
			steps.ExecutionContext{ParentRunID: after.RunID, RetryCount: 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.res.Success != tt.wantSuccess {
				t.Fatalf("Success = %v, want %v (%v)", tt.res.Success, tt.wantSuccess, tt.res.Err())
			}
			got := tt.res.Context
			got.Metadata = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Context = %+v, want %+v", got, tt.want)
			}
		})
	}
	if ids := map[string]bool{first.RunID: true, retry1.RunID: true, retry2.RunID: true, after.RunID: true}; len(ids) != 4 {
		t.Errorf("run ids are not fresh per attempt: %v", ids)
	}
}

func TestExplicitContextMerges(t *testing.T) {
	p := newCounting()
	p.failAt(steps.StepProcessing, 1)
	r := newRunner(t, p, steps.NewMemoryStore())
	in := []steps.Input{doc(subject, "x")}

	first := r.Execute(t.Context(), subject, in, &steps.ExecutionContext{Metadata: map[string]any{"tenant": "acme", "trace": "t1"}})
	if first.Context.ParentRunID != first.RunID || first.Context.Metadata["tenant"] != "acme" {
		t.Fatalf("first Context = %+v, want own parent and the caller's metadata", first.Context)
	}

	// Metadata travels along the chain and merges with the caller's.
	retry := r.Execute(t.Context(), subject, in, &steps.ExecutionContext{Metadata: map[string]any{"trace": "t2"}})
	if retry.Context.PreviousRunID != first.RunID || retry.Context.RetryCount != 1 {
		t.Errorf("retry lineage = %+v, want previous %s, retry 1", retry.Context, first.RunID)
	}
	if retry.Context.Metadata["tenant"] != "acme" || retry.Context.Metadata["trace"] != "t2" {
		t.Errorf("retry Metadata = %v, want tenant acme carried and trace t2 merged", retry.Context.Metadata)
	}

	// A caller-supplied lineage replaces the recorded one, as a whole.
	ec := &steps.ExecutionContext{ParentRunID: "root", PreviousRunID: "prev", LastErrorStep: steps.StepProcessing, RetryCount: 7}
	got := r.Execute(t.Context(), subject, in, ec)
	if c := got.Context; c.ParentRunID != "root" || c.PreviousRunID != "prev" || c.LastErrorStep != steps.StepProcessing || c.RetryCount != 7 {
		t.Errorf("Context = %+v, want the caller's lineage", c)
	}
	// ... but never the resume point: the last record was a success.
	if got.Context.Metadata[steps.MetaResumeStep] != string(steps.StepDependency) {
		t.Errorf("resume step = %v, want dependency", got.Context.Metadata[steps.MetaResumeStep])
	}
	if ec.Metadata != nil {
		t.Errorf("Execute changed the caller's context: %+v", ec)
	}
}
