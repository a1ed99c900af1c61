package pipeline

import "fmt"

// Status is where a batch stands.
type Status string

// Batch statuses. InProcess is the only non-terminal one.
const (
	InProcess         Status = "InProcess"
	Executed          Status = "Executed"
	Rejected          Status = "Rejected"
	PartiallyExecuted Status = "PartiallyExecuted"
	RemovedByOwner    Status = "RemovedByOwner"
	Expired           Status = "Expired"
)

// Terminal reports whether s is a final outcome.
func (s Status) Terminal() bool { return s != InProcess && s != "" }

// Outcome is the terminal result of a batch, the body of its callback.
type Outcome struct {
	Status Status `msgpack:"status" json:"status"`
	// Executed counts the functions that took effect (PartiallyExecuted(n), Expired(n)).
	Executed int `msgpack:"executed" json:"executed"`
	// Reason says why the batch was rejected or stopped.
	Reason string `msgpack:"reason,omitempty" json:"reason,omitempty"`
}

// String renders the outcome the way callbacks name it: Executed,
// Rejected(reason), PartiallyExecuted(n), RemovedByOwner, Expired(n).
func (o Outcome) String() string {
	switch o.Status {
	case Rejected:
		return fmt.Sprintf("Rejected(%s)", o.Reason)
	case PartiallyExecuted, Expired:
		return fmt.Sprintf("%s(%d)", o.Status, o.Executed)
	default:
		return string(o.Status)
	}
}

// ExecutedOutcome is the outcome of a batch whose functions all took effect.
func ExecutedOutcome(n int) Outcome { return Outcome{Status: Executed, Executed: n} }

// RejectedOutcome is the outcome of a batch none of whose functions took effect.
func RejectedOutcome(reason string) Outcome { return Outcome{Status: Rejected, Reason: reason} }

// FailedAfter is the outcome of a non-atomic batch that failed after n
// functions took effect: Rejected when n is 0, PartiallyExecuted(n) otherwise.
func FailedAfter(n int, reason string) Outcome {
	if n == 0 {
		return RejectedOutcome(reason)
	}
	return Outcome{Status: PartiallyExecuted, Executed: n, Reason: reason}
}

// ExpiredOutcome is the outcome of a batch that expired after n functions.
func ExpiredOutcome(n int) Outcome { return Outcome{Status: Expired, Executed: n, Reason: "expired"} }

// RemovedOutcome is the outcome of a batch the owner evicted.
func RemovedOutcome(n int) Outcome {
	return Outcome{Status: RemovedByOwner, Executed: n, Reason: "removed by owner"}
}
