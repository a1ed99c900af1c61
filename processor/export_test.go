package processor

// WithFault returns o with its crash-point hook set: f is called at each
// crash point of a step, and a non-nil error abandons the step right there,
// as if the process died.
func WithFault(o Options, f func(point string) error) Options {
	o.fault = f
	return o
}

// The crash points, for the tests that stop a step at one of them.
const (
	FaultAfterWork       = faultAfterWork
	FaultAfterProgress   = faultAfterProgress
	FaultAfterRequeue    = faultAfterRequeue
	FaultAfterDeadLetter = faultAfterDeadLetter
	FaultAfterCallback   = faultAfterCallback
	// FaultAfterCallbackGroup: a message of callbacks is stored, its
	// members' tokens not acknowledged.
	FaultAfterCallbackGroup = faultAfterCallbackGroup
)
