package e2e_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/x/steps"
	"github.com/tickflow/tickflow/x/steps/kvstore"
)

// TestRetryResumesOnARestartedWorker runs one underwriting as a non-atomic
// batch [application form, bank statement, business report]. The report
// fails at extraction; the worker is then replaced by a new one (new
// connection, run store and runners: only the runs bucket survives), and
// the report's retry resumes at extraction without validating or
// processing again.
func TestRetryResumesOnARestartedWorker(t *testing.T) {
	b := setup(t)
	faults := new(underwriting.Faults)
	faults.FailNext(steps.StepExtraction, 1)
	first := b.startWorker(t, "worker-1", processors(faults))
	id := b.enqueue(t, applicationForm(t, "12-3456789", nil), bankStatement(t), businessReport(fixedRetry(2, 20*time.Millisecond)))

	b.tickUntil(t, "the report's first failure", func() bool {
		p, ok := b.progress(t, id)
		return ok && p.FailuresOf(2) == 1
	})
	if p, _ := b.progress(t, id); p.Next != 2 || !strings.Contains(p.LastError, "p_clear_business_report extraction") {
		t.Fatalf("progress after the failure: next %d, last error %q; want the report failed at extraction", p.Next, p.LastError)
	}
	failed, err := newAdminRunStore(t, b).LatestRun(b.ctx, "p_clear_business_report", subject)
	if err != nil || failed.Success || failed.FailedStep != steps.StepExtraction {
		t.Fatalf("recorded run after the failure: %+v, %v", failed, err)
	}
	first.stop()

	second := b.startWorker(t, "worker-2", processors(nil))
	cb := b.outcome(t, id)
	if cb.Outcome.Status != pipeline.Executed || cb.Outcome.Executed != 3 {
		t.Fatalf("outcome %s (executed %d), want Executed with 3", cb.Outcome, cb.Outcome.Executed)
	}

	all := [4]int64{1, 1, 1, 1}
	for _, c := range []struct {
		name string
		r    *steps.Runner
		want [4]int64
	}{
		{"first worker's application form", first.runners.ApplicationForm, all},
		{"first worker's bank statement", first.runners.BankStatement, all},
		{"first worker's report", first.runners.ClearBusinessReport, all},
		{"second worker's application form", second.runners.ApplicationForm, [4]int64{}},
		{"second worker's bank statement", second.runners.BankStatement, [4]int64{}},
		// The retry resumed at extraction: no dependency check, validation
		// or processing on the new worker.
		{"second worker's report", second.runners.ClearBusinessReport, [4]int64{0, 0, 0, 1}},
	} {
		if got := runs(c.r); got != c.want {
			t.Errorf("%s ran dependency, validation, processing, extraction %v times, want %v", c.name, got, c.want)
		}
	}

	p, _ := b.progress(t, id)
	if len(p.Outputs) != 3 {
		t.Fatalf("progress holds %d outputs, want 3", len(p.Outputs))
	}
	in, err := steps.DecodeOutput(p.Outputs[2].Data)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := in.(*steps.Result)
	if !ok || !res.Success || res.ProcessorName != "p_clear_business_report" {
		t.Fatalf("report output = %#v", in)
	}
	ec := res.Context
	if ec.RetryCount != 1 || ec.PreviousRunID != failed.RunID || ec.ParentRunID != failed.RunID ||
		ec.LastErrorStep != steps.StepExtraction || ec.Metadata[steps.MetaResumeStep] != string(steps.StepExtraction) {
		t.Errorf("report lineage = %+v, want retry 1 of run %s, resumed at extraction", ec, failed.RunID)
	}
	flags, _ := res.ExtractionOutput["flags"].(map[string]any)
	if flags["ucc_filings"] != "Medium" || flags["account_holder_mismatch"] != false {
		t.Errorf("report flags = %v, want ucc_filings Medium and the account holder matched", flags)
	}
	if dls := b.deadLetters(t); len(dls) != 0 {
		t.Errorf("dead letters %+v, want none", dls)
	}
}

// TestPermanentFailures: failures at dependency and validation are not
// retried, whatever the function's retry logic allows, and end the batch
// with a dead letter.
func TestPermanentFailures(t *testing.T) {
	retry := fixedRetry(2, 20*time.Millisecond)
	tests := []struct {
		name      string
		functions func(t *testing.T) []pipeline.Function
		want      pipeline.Outcome
		failed    int    // index of the failing function
		reason    string // in the outcome's reason and the dead letter's error
		runs      func(*underwriting.Runners) map[string][2][4]int64
	}{
		{
			name: "application fails validation",
			functions: func(t *testing.T) []pipeline.Function {
				return []pipeline.Function{applicationForm(t, "07-1234567", retry), bankStatement(t), businessReport(retry)}
			},
			want:   pipeline.Outcome{Status: pipeline.Rejected},
			failed: 0,
			reason: "p_application_form validation: underwriting: p_application_form: invalid input: business_ein: prefix 07 is not assigned",
			runs: func(rs *underwriting.Runners) map[string][2][4]int64 {
				return map[string][2][4]int64{
					"application form": {runs(rs.ApplicationForm), {1, 1, 0, 0}},
					"bank statement":   {runs(rs.BankStatement), {}},
					"report":           {runs(rs.ClearBusinessReport), {}},
				}
			},
		},
		{
			name: "report without the application fails its dependency check",
			functions: func(t *testing.T) []pipeline.Function {
				return []pipeline.Function{bankStatement(t), businessReport(retry)}
			},
			want:   pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 1},
			failed: 1,
			reason: `p_clear_business_report dependency: steps: p_clear_business_report`,
			runs: func(rs *underwriting.Runners) map[string][2][4]int64 {
				return map[string][2][4]int64{
					"bank statement": {runs(rs.BankStatement), {1, 1, 1, 1}},
					"report":         {runs(rs.ClearBusinessReport), {1, 0, 0, 0}},
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			w := b.startWorker(t, "worker", processors(nil))
			id := b.enqueue(t, tt.functions(t)...)
			cb := b.outcome(t, id)
			if cb.Outcome.Status != tt.want.Status || cb.Outcome.Executed != tt.want.Executed {
				t.Fatalf("outcome %s, want %s", cb.Outcome, tt.want)
			}
			if !strings.Contains(cb.Outcome.Reason, tt.reason) {
				t.Errorf("reason %q, want it to contain %q", cb.Outcome.Reason, tt.reason)
			}
			for name, r := range tt.runs(w.runners) {
				if r[0] != r[1] {
					t.Errorf("%s ran dependency, validation, processing, extraction %v times, want %v", name, r[0], r[1])
				}
			}
			p, _ := b.progress(t, id)
			if got := p.FailuresOf(tt.failed); got != 1 {
				t.Errorf("function %d failed %d times, want 1 (not retried)", tt.failed, got)
			}
			dls := b.deadLetters(t)
			if len(dls) != 1 || dls[0].Batch.ID != id || dls[0].Index != tt.failed || !strings.Contains(dls[0].Error, tt.reason) {
				t.Fatalf("dead letters %+v, want one for function %d of batch %d", dls, tt.failed, id)
			}
			if cb.DeadLetter == 0 {
				t.Error("the callback does not point at its dead letter")
			}
		})
	}
}

func TestRegister(t *testing.T) {
	t.Run("serves the three types", func(t *testing.T) {
		mux := pipeline.NewServeMux()
		rs, err := underwriting.Register(mux, steps.NewMemoryStore(), processors(nil))
		if err != nil {
			t.Fatal(err)
		}
		want := []string{underwriting.TypeApplicationForm, underwriting.TypeBankStatement, underwriting.TypeClearBusinessReport}
		if got := mux.Types(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("types %q, want %q", got, want)
		}
		if rs.ApplicationForm.Name() != "p_application_form" || rs.BankStatement.Name() != "p_bank_statement" ||
			rs.ClearBusinessReport.Name() != "p_clear_business_report" {
			t.Fatalf("runners %s, %s, %s", rs.ApplicationForm.Name(), rs.BankStatement.Name(), rs.ClearBusinessReport.Name())
		}
	})
	tests := []struct {
		name  string
		store steps.RunStore
		ps    underwriting.Processors
		want  error
	}{
		{"no report", steps.NewMemoryStore(), underwriting.Processors{}, underwriting.ErrNoRecordSource},
		{"report without records", steps.NewMemoryStore(),
			underwriting.Processors{ClearBusinessReport: &underwriting.ClearBusinessReport{}}, underwriting.ErrNoRecordSource},
		{"no store", nil, processors(nil), steps.ErrNilStore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mux := pipeline.NewServeMux()
			if _, err := underwriting.Register(mux, tt.store, tt.ps); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if len(mux.Types()) != 0 {
				t.Fatalf("registered %q despite the error", mux.Types())
			}
		})
	}
}

// newAdminRunStore reads the runs bucket as admin, as an operator would.
func newAdminRunStore(t *testing.T, b *bundle) *kvstore.Store {
	t.Helper()
	s, err := kvstore.New(b.ctx, b.admin)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
