package steps_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tickflow/tickflow/x/steps"
)

// errInjected is what countingProcessor returns at a step told to fail.
var errInjected = errors.New("injected failure")

// countingProcessor requires s_doc and optionally p_upstream. It counts the
// runs of its steps and fails or panics at a step on demand, so tests can
// see which steps ran.
type countingProcessor struct {
	name     string
	required []string
	optional []string

	mu       sync.Mutex
	failNext map[steps.Step]int  // fail the next n runs of a step
	panicAt  map[steps.Step]bool // panic at every run of a step

	validations, processings, extractions atomic.Int64
	// extractedType is the dynamic type of the last value Extract received.
	extractedType atomic.Value
}

func newCounting() *countingProcessor {
	return &countingProcessor{name: "test", required: []string{"s_doc"}, optional: []string{"p_upstream"}}
}

// decodingProcessor is a countingProcessor that decodes its persisted
// processing output back into its own type.
type decodingProcessor struct{ *countingProcessor }

func newDecoding() decodingProcessor { return decodingProcessor{newCounting()} }

func (p decodingProcessor) DecodeProcessed(raw []byte) (any, error) {
	var v processed
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	return v, nil
}

// validated is countingProcessor's validation output.
type validated struct{ Bytes, Items int }

// processed is countingProcessor's processing output.
type processed struct {
	Total int    `json:"total"`
	Label string `json:"label"`
}

func (p *countingProcessor) failAt(step steps.Step, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failNext == nil {
		p.failNext = map[steps.Step]int{}
	}
	p.failNext[step] += n
}

func (p *countingProcessor) panicOn(step steps.Step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.panicAt == nil {
		p.panicAt = map[steps.Step]bool{}
	}
	p.panicAt[step] = true
}

func (p *countingProcessor) trip(step steps.Step) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.panicAt[step] {
		panic(fmt.Sprintf("%s exploded", step))
	}
	if p.failNext[step] > 0 {
		p.failNext[step]--
		return fmt.Errorf("%s: %w", step, errInjected)
	}
	return nil
}

// counts returns the runs of validation, processing and extraction.
func (p *countingProcessor) counts() [3]int64 {
	return [3]int64{p.validations.Load(), p.processings.Load(), p.extractions.Load()}
}

func (p *countingProcessor) Name() string       { return p.name }
func (p *countingProcessor) Required() []string { return p.required }
func (p *countingProcessor) Optional() []string { return p.optional }

func (p *countingProcessor) Validate(_ context.Context, in steps.Inputs) (any, error) {
	p.validations.Add(1)
	if err := p.trip(steps.StepValidation); err != nil {
		return nil, err
	}
	doc, ok := in.Stipulation("s_doc")
	if !ok || len(doc.Content) == 0 {
		return nil, errors.New("s_doc is empty")
	}
	return validated{Bytes: len(doc.Content), Items: len(in.Items)}, nil
}

func (p *countingProcessor) Process(_ context.Context, v any) (any, error) {
	p.processings.Add(1)
	if err := p.trip(steps.StepProcessing); err != nil {
		return nil, err
	}
	val := v.(validated)
	return processed{Total: val.Bytes * 10, Label: fmt.Sprintf("%d items", val.Items)}, nil
}

// Extract accepts processed, and the map[string]any a resume without a
// decoder hands over.
func (p *countingProcessor) Extract(_ context.Context, v any) (steps.Extraction, error) {
	p.extractions.Add(1)
	p.extractedType.Store(fmt.Sprintf("%T", v))
	if err := p.trip(steps.StepExtraction); err != nil {
		return nil, err
	}
	var pr processed
	switch v := v.(type) {
	case processed:
		pr = v
	case map[string]any:
		pr = processed{Total: int(v["total"].(float64)), Label: v["label"].(string)}
	default:
		return nil, fmt.Errorf("unexpected processed value %T", v)
	}
	return steps.Extraction{
		"payload":      map[string]any{"total": pr.Total, "label": pr.Label},
		"stipulations": map[string]any{},
		"flags":        map[string]any{"large": pr.Total >= 100},
	}, nil
}
