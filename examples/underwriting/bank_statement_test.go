package underwriting_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/x/steps"
)

func TestBankStatementExtracts(t *testing.T) {
	res := runner(t, &underwriting.BankStatement{}, nil).
		Execute(t.Context(), uw, []steps.Input{document(t, "s_bank_statement", validStatement())}, nil)
	if !res.Success {
		t.Fatalf("Execute: %v", res.Err())
	}
	want := steps.Extraction{
		"payload": map[string]any{"first_month": "2025-06", "last_month": "2025-08"},
		"stipulations": map[string]any{
			"account_holder": "Acme Corporation", "average_monthly_deposits": 39666.83, "months_covered": 3,
		},
		"flags":    map[string]any{"nsf": "Medium", "negative_balance": false, "missing_months": false},
		"factors":  map[string]any{"lowest_ending_balance": 2100.0, "negative_balance_months": 0, "nsf_count": 1},
		"metadata": map[string]any{"source": "s_bank_statement"},
	}
	if !reflect.DeepEqual(res.ExtractionOutput, want) {
		t.Errorf("output =\n%v\nwant\n%v", res.ExtractionOutput, want)
	}
}

func TestBankStatementFlags(t *testing.T) {
	st := map[string]any{
		"account_holder": "Acme",
		"months": []map[string]any{
			{"month": "2025-01", "deposits": 1000, "ending_balance": -50, "nsf_count": 2},
			{"month": "2025-04", "deposits": 1000, "ending_balance": 10, "nsf_count": 1},
		},
	}
	res := runner(t, &underwriting.BankStatement{}, nil).
		Execute(t.Context(), uw, []steps.Input{document(t, "s_bank_statement", st)}, nil)
	want := map[string]any{"nsf": "High", "negative_balance": true, "missing_months": true}
	if got := flags(t, res); !reflect.DeepEqual(got, want) {
		t.Errorf("flags = %v, want %v", got, want)
	}
}

func TestBankStatementValidation(t *testing.T) {
	tests := []struct {
		name string
		st   map[string]any
		want []underwriting.Problem
	}{
		{"no holder, no months", map[string]any{}, []underwriting.Problem{
			{Field: "account_holder", Rule: "is required"},
			{Field: "months", Rule: "must list at least one month"},
		}},
		{"bad months", map[string]any{"account_holder": "Acme", "months": []map[string]any{
			{"month": "2025-13", "deposits": 1},
			{"month": "2025-01", "deposits": -1, "withdrawals": -2, "nsf_count": -3},
			{"month": "2025-01"},
		}}, []underwriting.Problem{
			{Field: "months[0].month", Rule: `must be YYYY-MM (got "2025-13")`},
			{Field: "months[1].deposits", Rule: "must not be negative (got -1)"},
			{Field: "months[1].withdrawals", Rule: "must not be negative (got -2)"},
			{Field: "months[1].nsf_count", Rule: "must not be negative (got -3)"},
			{Field: "months[2].month", Rule: "2025-01 is listed twice"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runner(t, &underwriting.BankStatement{}, nil).
				Execute(t.Context(), uw, []steps.Input{document(t, "s_bank_statement", tt.st)}, nil)
			ve, ok := errors.AsType[*underwriting.ValidationError](res.Err())
			if !ok || res.Error.Step != steps.StepValidation {
				t.Fatalf("Err() = %v, want a *ValidationError at validation", res.Err())
			}
			if !reflect.DeepEqual(ve.Problems, tt.want) {
				t.Errorf("problems =\n%q\nwant\n%q", ve.Problems, tt.want)
			}
		})
	}
}
