package steps_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/x/steps"
)

// unencodable returns a processing output encoding/json cannot encode.
type unencodable struct{ *countingProcessor }

func (unencodable) Process(context.Context, any) (any, error) { return func() {}, nil }

func TestUnencodableProcessingOutputIsLoggedAndRerunInFull(t *testing.T) {
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, nil))
	r := newRunner(t, unencodable{newCounting()}, steps.NewMemoryStore(), steps.WithLogger(logger))
	inputs := []steps.Input{doc(subject, "x")}

	first := r.Execute(t.Context(), subject, inputs, nil)
	if first.Error == nil || first.Error.Step != steps.StepExtraction {
		t.Fatalf("first attempt: %+v, want an extraction failure", first.Error)
	}
	if _, ok := first.Error.Payload.(string); !ok {
		t.Errorf("Payload = %T, want a string standing in for the unencodable value", first.Error.Payload)
	}
	if _, err := json.Marshal(first); err != nil {
		t.Errorf("failed Result does not encode: %v", err)
	}
	retry := r.Execute(t.Context(), subject, inputs, nil)
	if got := retry.Context.Metadata[steps.MetaResumeStep]; got != string(steps.StepDependency) {
		t.Errorf("retry resumed at %v, want a full run", got)
	}
	for _, want := range []string{
		`"msg":"step failed","processor":"p_test","subject_id":"UW-123","run_id":"` + first.RunID + `","step":"extraction"`,
		`"msg":"processing output does not encode to JSON; a retry will run in full"`,
		`"msg":"cannot resume at extraction"`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
}
