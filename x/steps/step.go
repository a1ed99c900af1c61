package steps

// Step names one step of the pipeline.
type Step string

// The pipeline's steps, in execution order.
const (
	// StepDependency checks that the inputs hold every required dependency,
	// all of the run's subject. The Runner performs it.
	StepDependency Step = "dependency"
	// StepValidation runs Processor.Validate.
	StepValidation Step = "validation"
	// StepProcessing runs Processor.Process.
	StepProcessing Step = "processing"
	// StepExtraction runs Processor.Extract.
	StepExtraction Step = "extraction"
)

// order is the execution order; a Step's position in it is its index.
var order = [...]Step{StepDependency, StepValidation, StepProcessing, StepExtraction}

// index returns s's position in the pipeline, or -1 for an unknown step.
func (s Step) index() int {
	for i, o := range order {
		if o == s {
			return i
		}
	}
	return -1
}
