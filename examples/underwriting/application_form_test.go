package underwriting_test

import (
	"errors"
	"maps"
	"reflect"
	"testing"

	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/x/steps"
)

func TestApplicationFormExtracts(t *testing.T) {
	res := runner(t, &underwriting.ApplicationForm{}, nil).
		Execute(t.Context(), uw, []steps.Input{document(t, "s_application_form", validApplication())}, nil)
	if !res.Success || res.ProcessorName != "p_application_form" {
		t.Fatalf("Execute: %v", res.Err())
	}
	want := map[string]any{
		"business_name": "ACME Corp", "business_ein": "123456789",
		"requested_amount": 50000.0, "years_in_business": 3.0, "industry": "retail_trade",
	}
	if got := res.ExtractionOutput["stipulations"]; !reflect.DeepEqual(got, want) {
		t.Errorf("stipulations = %v, want %v", got, want)
	}
	wantFlags := map[string]any{"young_business": false, "high_risk_industry": false, "large_request": false}
	if got := flags(t, res); !reflect.DeepEqual(got, wantFlags) {
		t.Errorf("flags = %v, want %v", got, wantFlags)
	}
}

func TestApplicationFormFlags(t *testing.T) {
	app := validApplication()
	app["years_in_business"] = 1.5
	app["industry"] = "gambling"
	app["requested_amount"] = 300000
	res := runner(t, &underwriting.ApplicationForm{}, nil).
		Execute(t.Context(), uw, []steps.Input{document(t, "s_application_form", app)}, nil)
	want := map[string]any{"young_business": true, "high_risk_industry": true, "large_request": true}
	if got := flags(t, res); !reflect.DeepEqual(got, want) {
		t.Errorf("flags = %v, want %v", got, want)
	}
}

func TestApplicationFormValidation(t *testing.T) {
	with := func(changes map[string]any) map[string]any {
		app := validApplication()
		maps.Copy(app, changes)
		for k, v := range changes {
			if v == nil {
				delete(app, k)
			}
		}
		return app
	}
	tests := []struct {
		name    string
		content any // JSON-encoded unless a string
		want    []underwriting.Problem
	}{
		{"EIN without hyphen", with(map[string]any{"business_ein": "123456789"}), nil},
		{"missing name", with(map[string]any{"business_name": nil}),
			[]underwriting.Problem{{Field: "business_name", Rule: "is required"}}},
		{"blank name", with(map[string]any{"business_name": " \t"}),
			[]underwriting.Problem{{Field: "business_name", Rule: "is required"}}},
		{"short EIN", with(map[string]any{"business_ein": "12345"}),
			[]underwriting.Problem{{Field: "business_ein", Rule: `must be 9 digits, as 123456789 or 12-3456789 (got "12345")`}}},
		{"EIN with letters", with(map[string]any{"business_ein": "12-34567AB"}),
			[]underwriting.Problem{{Field: "business_ein", Rule: `must be 9 digits, as 123456789 or 12-3456789 (got "12-34567AB")`}}},
		{"EIN hyphen misplaced", with(map[string]any{"business_ein": "123-456789"}),
			[]underwriting.Problem{{Field: "business_ein", Rule: `must be 9 digits, as 123456789 or 12-3456789 (got "123-456789")`}}},
		{"EIN unassigned prefix", with(map[string]any{"business_ein": "07-1234567"}),
			[]underwriting.Problem{{Field: "business_ein", Rule: `prefix 07 is not assigned by the IRS (got "07-1234567")`}}},
		{"everything wrong at once", map[string]any{"requested_amount": -1, "years_in_business": -2},
			[]underwriting.Problem{
				{Field: "business_name", Rule: "is required"},
				{Field: "business_ein", Rule: `must be 9 digits, as 123456789 or 12-3456789 (got "")`},
				{Field: "requested_amount", Rule: "must be positive (got -1)"},
				{Field: "years_in_business", Rule: "must not be negative (got -2)"},
				{Field: "industry", Rule: "is required"},
			}},
		{"not JSON", "business_name=ACME",
			[]underwriting.Problem{{Field: "s_application_form", Rule: "is not the expected JSON document: invalid character 'b' looking for beginning of value"}}},
		{"empty", "  ",
			[]underwriting.Problem{{Field: "s_application_form", Rule: "is empty; want a JSON document"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stip steps.Stipulation
			if s, ok := tt.content.(string); ok {
				stip = steps.Stipulation{Name: "s_application_form", SubjectID: uw, Content: []byte(s)}
			} else {
				stip = document(t, "s_application_form", tt.content)
			}
			res := runner(t, &underwriting.ApplicationForm{}, nil).Execute(t.Context(), uw, []steps.Input{stip}, nil)
			if tt.want == nil {
				if !res.Success {
					t.Fatalf("Execute: %v", res.Err())
				}
				return
			}
			if res.Success || res.Error.Step != steps.StepValidation || res.Error.Exception != "*underwriting.ValidationError" {
				t.Fatalf("Error = %+v, want a *underwriting.ValidationError at validation", res.Error)
			}
			ve, ok := errors.AsType[*underwriting.ValidationError](res.Err())
			if !ok || !errors.Is(res.Err(), underwriting.ErrInvalid) {
				t.Fatalf("Err() = %v, want a *ValidationError matching ErrInvalid", res.Err())
			}
			if ve.Processor != "p_application_form" || !reflect.DeepEqual(ve.Problems, tt.want) {
				t.Errorf("problems = %q, want %q", ve.Problems, tt.want)
			}
		})
	}
}
