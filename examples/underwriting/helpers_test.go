package underwriting_test

import (
	"encoding/json"
	"testing"

	"github.com/tickflow/tickflow/x/steps"
)

const uw = "UW-123"

// document returns stipulation name for subject uw with v as JSON content.
func document(t *testing.T, name string, v any) steps.Stipulation {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return steps.Stipulation{Name: name, SubjectID: uw, Content: raw}
}

func runner(t *testing.T, p steps.Processor, store steps.RunStore) *steps.Runner {
	t.Helper()
	if store == nil {
		store = steps.NewMemoryStore()
	}
	r, err := steps.New(p, store)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

func validApplication() map[string]any {
	return map[string]any{
		"business_name":     "  ACME   Corp ",
		"business_ein":      "12-3456789",
		"requested_amount":  50000,
		"years_in_business": 3,
		"industry":          "Retail Trade",
	}
}

func validStatement() map[string]any {
	return map[string]any{
		"account_holder": "Acme Corporation",
		"months": []map[string]any{
			{"month": "2025-08", "deposits": 41000, "withdrawals": 39000, "ending_balance": 5200, "nsf_count": 0},
			{"month": "2025-06", "deposits": 38000.5, "withdrawals": 36000, "ending_balance": 3100, "nsf_count": 1},
			{"month": "2025-07", "deposits": 40000, "withdrawals": 41000, "ending_balance": 2100, "nsf_count": 0},
		},
	}
}

// flags returns the "flags" section of res's output.
func flags(t *testing.T, res *steps.Result) map[string]any {
	t.Helper()
	if !res.Success {
		t.Fatalf("%s failed: %v", res.ProcessorName, res.Err())
	}
	f, ok := res.ExtractionOutput["flags"].(map[string]any)
	if !ok {
		t.Fatalf("%s: no flags in %v", res.ProcessorName, res.ExtractionOutput)
	}
	return f
}
