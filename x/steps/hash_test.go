package steps_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tickflow/tickflow/x/steps"
)

func mustHash(t *testing.T, in ...steps.Input) string {
	t.Helper()
	h, err := steps.InputHash(in)
	if err != nil {
		t.Fatalf("InputHash: %v", err)
	}
	return h
}

func TestInputHash(t *testing.T) {
	base := &steps.Result{
		RunID: "run-1", ProcessorName: "p_form", SubjectID: subject, Success: true,
		ExtractionOutput: steps.Extraction{"stipulations": map[string]any{"business_ein": "123456789", "amount": 50000}},
		Context:          steps.ExecutionContext{ParentRunID: "run-1", RetryCount: 0},
		Timestamp:        time.Date(2025, 9, 3, 7, 0, 0, 0, time.UTC), DurationMS: 100,
	}
	volatile := *base
	volatile.RunID, volatile.DurationMS, volatile.Timestamp = "run-2", 5, time.Now()
	volatile.Context = steps.ExecutionContext{ParentRunID: "run-0", PreviousRunID: "run-1", RetryCount: 3}
	outcome := *base
	outcome.ExtractionOutput = steps.Extraction{"stipulations": map[string]any{"business_ein": "987654321", "amount": 50000}}
	raw, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := steps.DecodeInput(raw)
	if err != nil {
		t.Fatal(err)
	}
	d := doc(subject, "content")

	tests := []struct {
		name string
		a, b []steps.Input
		same bool
	}{
		{"stable", []steps.Input{d, base}, []steps.Input{d, base}, true},
		{"value and pointer alike", []steps.Input{d, base}, []steps.Input{&d, *base}, true},
		{"volatile result fields ignored", []steps.Input{base}, []steps.Input{&volatile}, true},
		{"a JSON round trip changes nothing", []steps.Input{base}, []steps.Input{decoded}, true},
		{"result outcome counts", []steps.Input{base}, []steps.Input{&outcome}, false},
		{"stipulation content counts", []steps.Input{d}, []steps.Input{doc(subject, "content!")}, false},
		{"stipulation name counts", []steps.Input{d}, []steps.Input{steps.Stipulation{Name: "s_other", SubjectID: subject, Content: d.Content}}, false},
		{"order counts", []steps.Input{d, base}, []steps.Input{base, d}, false},
		{"other kinds count by value", []steps.Input{map[string]int{"a": 1}}, []steps.Input{map[string]int{"a": 2}}, false},
		{"other kinds count by type", []steps.Input{map[string]int{"a": 1}}, []steps.Input{map[string]int64{"a": 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := mustHash(t, tt.a...), mustHash(t, tt.b...)
			if (a == b) != tt.same {
				t.Errorf("hashes %s and %s: equal = %v, want %v", a, b, a == b, tt.same)
			}
			if len(a) != 64 {
				t.Errorf("hash %q is not hex SHA-256", a)
			}
		})
	}
}

func TestInputHashUnencodable(t *testing.T) {
	if h, err := steps.InputHash([]steps.Input{func() {}}); err == nil {
		t.Fatalf("InputHash(func) = %q, want an error", h)
	}
}
