package underwriting

import (
	"fmt"
	"sync"

	"github.com/tickflow/tickflow/x/steps"
)

// Faults injects failures into a processor's steps: after FailNext(step, n),
// the next n runs of step return an *InjectedError before doing any work.
// A nil *Faults injects nothing. It is safe for concurrent use; its zero
// value is ready to use.
type Faults struct {
	mu   sync.Mutex
	next map[steps.Step]int
}

// FailNext makes the next n runs of step fail, on top of failures already
// pending. Only validation, processing and extraction run processor code, so
// FailNext panics for another step: the dependency step fails by leaving a
// dependency out of the inputs.
func (f *Faults) FailNext(step steps.Step, n int) {
	switch step {
	case steps.StepValidation, steps.StepProcessing, steps.StepExtraction:
	default:
		panic(fmt.Sprintf("underwriting: cannot inject a failure at step %q", step))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next == nil {
		f.next = map[steps.Step]int{}
	}
	f.next[step] += n
}

// Pending returns how many injected failures of step are still to come.
func (f *Faults) Pending(step steps.Step) int {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next[step]
}

// check consumes one pending failure of step, if any.
func (f *Faults) check(processor string, step steps.Step) error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.next[step] <= 0 {
		return nil
	}
	f.next[step]--
	return &InjectedError{Processor: processor, Step: step}
}
