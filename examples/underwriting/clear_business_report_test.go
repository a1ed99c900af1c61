package underwriting_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/x/steps"
)

var records = underwriting.StaticRecords{
	"123456789": {Lawsuits: 0, Dockets: 1, UCCFilings: 2, LiensAndJudgments: 4},
}

// upstream runs p_application_form and p_bank_statement on the valid
// documents, with app changed by edit if not nil.
func upstream(t *testing.T, edit func(app map[string]any)) (form, bank *steps.Result) {
	t.Helper()
	app := validApplication()
	if edit != nil {
		edit(app)
	}
	form = runner(t, &underwriting.ApplicationForm{}, nil).
		Execute(t.Context(), uw, []steps.Input{document(t, "s_application_form", app)}, nil)
	bank = runner(t, &underwriting.BankStatement{}, nil).
		Execute(t.Context(), uw, []steps.Input{document(t, "s_bank_statement", validStatement())}, nil)
	return form, bank
}

func TestClearBusinessReport(t *testing.T) {
	form, bank := upstream(t, nil)
	failedBank := *bank
	failedBank.Success, failedBank.Error = false, &steps.StepError{Step: steps.StepValidation, Message: "bad"}
	otherHolder := *bank
	otherHolder.ExtractionOutput = steps.Extraction{"stipulations": map[string]any{"account_holder": "Roadrunner Supplies LLC"}}

	recordFlags := map[string]any{"lawsuits": "Low", "dockets": "Medium", "criminal_history": "Low",
		"ucc_filings": "Medium", "liens_and_judgments": "High"}
	with := func(extra map[string]any) map[string]any {
		f := map[string]any{}
		for k, v := range recordFlags {
			f[k] = v
		}
		for k, v := range extra {
			f[k] = v
		}
		return f
	}
	tests := []struct {
		name      string
		inputs    []steps.Input
		wantFlags map[string]any
	}{
		{"application only", []steps.Input{form}, recordFlags},
		{"matching bank statement", []steps.Input{form, bank}, with(map[string]any{"account_holder_mismatch": false})},
		{"bank statement of another business", []steps.Input{form, &otherHolder}, with(map[string]any{"account_holder_mismatch": true})},
		{"failed bank statement is ignored", []steps.Input{form, &failedBank}, recordFlags},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runner(t, &underwriting.ClearBusinessReport{Records: records}, nil).Execute(t.Context(), uw, tt.inputs, nil)
			if got := flags(t, res); !reflect.DeepEqual(got, tt.wantFlags) {
				t.Errorf("flags = %v, want %v", got, tt.wantFlags)
			}
			if got := res.ExtractionOutput["factors"]; !reflect.DeepEqual(got, map[string]any{"public_record_count": 7}) {
				t.Errorf("factors = %v", got)
			}
			if got := res.ExtractionOutput["stipulations"]; !reflect.DeepEqual(got, map[string]any{"business_name": "ACME Corp", "business_ein": "123456789"}) {
				t.Errorf("stipulations = %v", got)
			}
		})
	}
}

// TestClearBusinessReportFromJSON feeds the report the upstream results as
// a worker would: JSON-encoded, decoded with steps.DecodeInput.
func TestClearBusinessReportFromJSON(t *testing.T) {
	form, bank := upstream(t, nil)
	var inputs []steps.Input
	for _, r := range []*steps.Result{form, bank} {
		raw, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		in, err := steps.DecodeInput(raw)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, in)
	}
	direct := runner(t, &underwriting.ClearBusinessReport{Records: records}, nil).Execute(t.Context(), uw, []steps.Input{form, bank}, nil)
	decoded := runner(t, &underwriting.ClearBusinessReport{Records: records}, nil).Execute(t.Context(), uw, inputs, nil)
	if !decoded.Success || !reflect.DeepEqual(decoded.ExtractionOutput, direct.ExtractionOutput) {
		t.Errorf("from JSON: %v\ndirect: %v (%v)", decoded.ExtractionOutput, direct.ExtractionOutput, decoded.Err())
	}
	if decoded.Context.Metadata[steps.MetaInputHash] != direct.Context.Metadata[steps.MetaInputHash] {
		t.Errorf("input hash differs after a JSON round trip")
	}
}

func TestClearBusinessReportFailures(t *testing.T) {
	form, _ := upstream(t, nil)
	badForm, _ := upstream(t, func(app map[string]any) { app["business_ein"] = "bad" })
	noEIN := *form
	noEIN.ExtractionOutput = steps.Extraction{"stipulations": map[string]any{"business_name": "ACME"}}
	otherSubject := *form
	otherSubject.SubjectID = "UW-999"

	tests := []struct {
		name     string
		report   *underwriting.ClearBusinessReport
		inputs   []steps.Input
		wantStep steps.Step
		wantErr  error
		wantMsg  string
	}{
		{"no application", &underwriting.ClearBusinessReport{Records: records}, nil,
			steps.StepDependency, steps.ErrDependencyNotFound, `required dependency "p_application_form"`},
		{"application of another subject", &underwriting.ClearBusinessReport{Records: records}, []steps.Input{&otherSubject},
			steps.StepDependency, steps.ErrDependencyMismatch, `belongs to subject "UW-999"`},
		{"failed application", &underwriting.ClearBusinessReport{Records: records}, []steps.Input{badForm},
			steps.StepValidation, underwriting.ErrInvalid, "p_application_form: must be a successful result"},
		{"application without EIN", &underwriting.ClearBusinessReport{Records: records}, []steps.Input{&noEIN},
			steps.StepValidation, underwriting.ErrInvalid, `business_ein: must be 9 digits (got "")`},
		{"no record source", &underwriting.ClearBusinessReport{}, []steps.Input{form},
			steps.StepProcessing, underwriting.ErrNoRecordSource, "no public record source"},
		{"record source down", &underwriting.ClearBusinessReport{Records: downSource{}}, []steps.Input{form},
			steps.StepProcessing, errSourceDown, "public records of EIN 123456789: CLEAR unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runner(t, tt.report, nil).Execute(t.Context(), uw, tt.inputs, nil)
			if res.Success || res.Error.Step != tt.wantStep {
				t.Fatalf("Error = %+v, want a failure at %s", res.Error, tt.wantStep)
			}
			if !errors.Is(res.Err(), tt.wantErr) || !strings.Contains(res.Error.Message, tt.wantMsg) {
				t.Errorf("Err() = %v, want %v containing %q", res.Err(), tt.wantErr, tt.wantMsg)
			}
		})
	}
}

var errSourceDown = errors.New("CLEAR unavailable")

type downSource struct{}

func (downSource) PublicRecords(context.Context, string) (underwriting.PublicRecords, error) {
	return underwriting.PublicRecords{}, errSourceDown
}

// countingSource counts lookups, to show which steps a retry ran.
type countingSource struct {
	underwriting.RecordSource
	calls int
}

func (c *countingSource) PublicRecords(ctx context.Context, ein string) (underwriting.PublicRecords, error) {
	c.calls++
	return c.RecordSource.PublicRecords(ctx, ein)
}

// TestClearBusinessReportResumes injects a failure at each step and retries
// with a fresh processor and Runner on the same store, as a restarted worker
// would.
func TestClearBusinessReportResumes(t *testing.T) {
	form, bank := upstream(t, nil)
	inputs := []steps.Input{form, bank}
	tests := []struct {
		step        steps.Step
		wantResume  steps.Step
		wantLookups int // record lookups by the retry
	}{
		{steps.StepValidation, steps.StepValidation, 1},
		{steps.StepProcessing, steps.StepValidation, 1},
		{steps.StepExtraction, steps.StepExtraction, 0},
	}
	for _, tt := range tests {
		t.Run(string(tt.step), func(t *testing.T) {
			store := steps.NewMemoryStore()
			faults := new(underwriting.Faults)
			faults.FailNext(tt.step, 1)
			first := runner(t, &underwriting.ClearBusinessReport{Records: records, Faults: faults}, store).
				Execute(t.Context(), uw, inputs, nil)
			if first.Success || first.Error.Step != tt.step || first.Error.Exception != "*underwriting.InjectedError" ||
				!errors.Is(first.Err(), underwriting.ErrInjected) {
				t.Fatalf("first attempt: %+v, want an injected failure at %s", first.Error, tt.step)
			}
			if faults.Pending(tt.step) != 0 {
				t.Errorf("Pending(%s) = %d after the failure, want 0", tt.step, faults.Pending(tt.step))
			}

			src := &countingSource{RecordSource: records}
			r := runner(t, &underwriting.ClearBusinessReport{Records: src}, store)
			retry := r.Execute(t.Context(), uw, inputs, nil)

			if !retry.Success {
				t.Fatalf("retry: %v", retry.Err())
			}
			if got := retry.Context.Metadata[steps.MetaResumeStep]; got != string(tt.wantResume) {
				t.Errorf("resumed at %v, want %s", got, tt.wantResume)
			}
			if src.calls != tt.wantLookups {
				t.Errorf("retry looked records up %d times, want %d", src.calls, tt.wantLookups)
			}
			if r.Runs(steps.StepDependency) != 0 {
				t.Errorf("retry ran the dependency step")
			}
			if c := retry.Context; c.ParentRunID != first.RunID || c.PreviousRunID != first.RunID || c.RetryCount != 1 || c.LastErrorStep != tt.step {
				t.Errorf("lineage = %+v", c)
			}
			if got := flags(t, retry)["liens_and_judgments"]; got != "High" {
				t.Errorf("liens_and_judgments = %v, want High", got)
			}
		})
	}
}

func TestFaultsRejectDependencyStep(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("FailNext(dependency) did not panic")
		}
	}()
	new(underwriting.Faults).FailNext(steps.StepDependency, 1)
}
