package steps_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/tickflow/tickflow/x/steps"
)

// lineCounter counts the lines of the s_notes stipulation. When flaky, its
// first extraction fails, as with a downstream service briefly unavailable.
type lineCounter struct {
	flaky       bool
	extractions atomic.Int32
}

func (*lineCounter) Name() string       { return "line_count" }
func (*lineCounter) Required() []string { return []string{"s_notes"} }
func (*lineCounter) Optional() []string { return nil }

func (*lineCounter) Validate(_ context.Context, in steps.Inputs) (any, error) {
	notes, _ := in.Stipulation("s_notes")
	if len(bytes.TrimSpace(notes.Content)) == 0 {
		return nil, errors.New("s_notes is empty")
	}
	return string(notes.Content), nil
}

func (*lineCounter) Process(_ context.Context, v any) (any, error) {
	return strings.Count(strings.TrimSpace(v.(string)), "\n") + 1, nil
}

// DecodeProcessed gives Extract an int back when a retry resumes at
// extraction; without it, Extract would receive the float64 JSON decodes to.
func (*lineCounter) DecodeProcessed(raw []byte) (any, error) {
	var n int
	err := json.Unmarshal(raw, &n)
	return n, err
}

func (c *lineCounter) Extract(_ context.Context, v any) (steps.Extraction, error) {
	if c.extractions.Add(1) == 1 && c.flaky {
		return nil, errors.New("report service unavailable")
	}
	lines := v.(int)
	return steps.Extraction{
		"payload": map[string]any{"lines": lines},
		"flags":   map[string]any{"long": lines > 100},
	}, nil
}

// A failed attempt is retried by calling Execute again: the runner finds the
// failed attempt in the store and, the inputs being unchanged, resumes at the
// failed step with the persisted processing output.
func Example() {
	runner, err := steps.New(&lineCounter{flaky: true}, steps.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	inputs := []steps.Input{
		steps.Stipulation{Name: "s_notes", SubjectID: "UW-123", Content: []byte("one\ntwo\nthree")},
	}

	first := runner.Execute(ctx, "UW-123", inputs, nil)
	fmt.Println("first:", first.Success, first.Error.Step, first.Error.Message)

	retry := runner.Execute(ctx, "UW-123", inputs, nil)
	fmt.Println("retry:", retry.Success, "resumed at", retry.Context.Metadata[steps.MetaResumeStep])
	fmt.Println("retry count:", retry.Context.RetryCount, "same parent:", retry.Context.ParentRunID == first.RunID)
	fmt.Println("output:", retry.ExtractionOutput["payload"])
	fmt.Println("processing runs:", runner.Runs(steps.StepProcessing), "extraction runs:", runner.Runs(steps.StepExtraction))
	// Output:
	// first: false extraction report service unavailable
	// retry: true resumed at extraction
	// retry count: 1 same parent: true
	// output: map[lines:3]
	// processing runs: 1 extraction runs: 2
}

// A missing dependency fails the first step with a typed error.
func ExampleRunner_Execute_dependencyNotFound() {
	runner, err := steps.New(&lineCounter{}, steps.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	res := runner.Execute(context.Background(), "UW-123", nil, nil)

	fmt.Println(res.Error.Step, res.Error.Exception)
	var nf *steps.DependencyNotFoundError
	if errors.As(res.Err(), &nf) {
		fmt.Println("missing:", nf.Dependency)
	}
	// Output:
	// dependency *steps.DependencyNotFoundError
	// missing: s_notes
}

// A Result travels to the next processor as JSON: DecodeInput tells it from
// a Stipulation.
func ExampleDecodeInput() {
	runner, err := steps.New(&lineCounter{}, steps.NewMemoryStore())
	if err != nil {
		panic(err)
	}
	notes := steps.Stipulation{Name: "s_notes", SubjectID: "UW-123", Content: []byte("a\nb")}
	res := runner.Execute(context.Background(), "UW-123", []steps.Input{notes}, nil)

	encoded, err := json.Marshal(res)
	if err != nil {
		panic(err)
	}
	in, err := steps.DecodeInput(encoded)
	if err != nil {
		panic(err)
	}
	decoded := in.(*steps.Result)
	fmt.Printf("%T %s %s success=%v\n", in, decoded.ProcessorName, decoded.SubjectID, decoded.Success)
	// Output:
	// *steps.Result p_line_count UW-123 success=true
}

// New rejects a processor that declares no usable dependency.
func ExampleNew() {
	_, err := steps.New(declared{newCounting(), "orphan", []string{"application_form"}, nil}, steps.NewMemoryStore())
	fmt.Println(errors.Is(err, steps.ErrImplementation))
	fmt.Println(err)
	// Output:
	// true
	// steps: processor implementation error: processor "orphan": Required() lists no dependency starting with "p_" or "s_" (got ["application_form"])
}
