package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// The API's view of a batch's records: what the batch operation answers
// (BatchReply) and the listings quote. Their JSON is the JSON of the
// records authz and the processors keep (streams.BatchRecord,
// streams.Progress), field for field, but they are types of their own:
// the records are persistence, with their own msgpack codecs and methods,
// in a package that needs nats.go, while a caller of the API needs the
// shapes alone.

// BatchRecord is authz's record of a batch: what was submitted, its
// status and, once it finished, its outcome and outputs.
type BatchRecord struct {
	// V is the record's wire version.
	V uint8 `json:"v"`
	// Batch is the batch as authz accepted it.
	Batch pipeline.Batch `json:"batch"`
	// Status is InProcess until the batch finished, then its terminal
	// status.
	Status pipeline.Status `json:"status"`
	// Outcome is the batch's terminal outcome, set once it finished.
	Outcome *pipeline.Outcome `json:"outcome,omitempty"`
	// IdempotencyKey is the caller's key for duplicate submissions.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Attempts is the attempt count the terminal callback reported.
	Attempts int `json:"attempts"`
	// Fallback is true when a fallback handled a failed function.
	Fallback bool `json:"fallback,omitempty"`
	// DeadLetter is the DLQ sequence of the batch's dead letter, if any.
	DeadLetter uint64 `json:"dead_letter,omitempty"`
	// ReplayedAs is the id of the batch this one's dead letter was replayed as.
	ReplayedAs uint64 `json:"replayed_as,omitempty"`
	// Outputs are the results of the functions that took effect, as the
	// terminal callback carried them: set once the batch finished. An
	// output whose data did not fit beside the rest of the record keeps
	// its index and type only (Trimmed).
	Outputs []pipeline.Output `json:"outputs,omitempty"`
	// CreatedAt is when authz accepted the batch; UpdatedAt when the
	// record last changed.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// FinishedAt is when the batch finished (its callback's time), set
	// with its terminal status: its records expire the retention's age
	// after.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// History lists what happened to the batch, oldest first.
	History []Event `json:"history,omitempty"`
}

// Event is one line of a batch record's history.
type Event struct {
	// At is when it happened.
	At time.Time `json:"at"`
	// What names it, e.g. "callback".
	What string `json:"what"`
	// Detail says more, when there is more to say.
	Detail string `json:"detail,omitempty"`
}

// State is where a batch's execution stands in its progress record.
type State string

// Progress states.
const (
	// StateQueued: waiting for its turn in the queue, running, or waiting
	// on a retry delay.
	StateQueued State = "queued"
	// StateParked: function Parked.Index executed and waits for a
	// confirmation.
	StateParked State = "parked"
	// StateDone: terminal; Outcome is set and the callback was published.
	StateDone State = "done"
	// StateScheduled: waiting for its run_at, with no token in a queue
	// yet. A listing's state only: never written in a progress record.
	StateScheduled State = "scheduled"
)

// Progress is the execution state of one batch, as the processor that
// moved it last wrote it.
type Progress struct {
	// V is the record's wire version.
	V uint8 `json:"v"`
	// BatchID is the batch.
	BatchID uint64 `json:"id"`
	// Gen is bumped by authz each time it moves the batch to another
	// position of its queue.
	Gen uint32 `json:"gen"`
	// Rotation counts the batch's rotations to the back of its queue.
	Rotation uint32 `json:"step"`
	// State is where the batch stands.
	State State `json:"state"`
	// Next is the index of the next function to run (non-atomic).
	Next int `json:"next"`
	// Failures counts failed attempts per function (atomic: index 0 counts the unit).
	Failures []int `json:"failures,omitempty"`
	// Rounds counts per function the failures that invalidated an effect
	// that took place (a failed confirmation).
	Rounds []int `json:"rounds,omitempty"`
	// LastError is the last failure's message.
	LastError string `json:"last_error,omitempty"`
	// Parked is set while State is StateParked.
	Parked *ParkedFunction `json:"parked,omitempty"`
	// NotBefore delays the next step: the batch runs again at that time
	// (a retry after a failed confirmation).
	NotBefore time.Time `json:"not_before,omitzero"`
	// FailedIndex is the function whose failure ended the batch (StateDone only).
	FailedIndex int `json:"failed_index,omitempty"`
	// Fallbacks lists the functions a fallback handled.
	Fallbacks []int `json:"fallbacks,omitempty"`
	// FallbackDue is set while a function given up on waits for a worker
	// to attempt its fallback.
	FallbackDue *DueFallback `json:"fallback_due,omitempty"`
	// Waiting is set while the next step waits for a worker to attempt its
	// call (none serves the function type, or none answered for long): why,
	// and since when.
	Waiting *Waiting `json:"waiting,omitempty"`
	// Outputs are the results of the functions that took effect.
	Outputs []pipeline.Output `json:"outputs,omitempty"`
	// Outcome is set once State is StateDone.
	Outcome *pipeline.Outcome `json:"outcome,omitempty"`
	// UpdatedAt is when the record was written last.
	UpdatedAt time.Time `json:"updated_at"`
	// By names the processor replica (or "authz") that wrote the record
	// last, at UpdatedAt: who moved the batch last.
	By string `json:"by,omitempty"`
}

// ParkedFunction is the function waiting for its confirmation.
type ParkedFunction struct {
	// Index is the function.
	Index int `json:"index"`
	// Deadline is when the wait times out.
	Deadline time.Time `json:"deadline"`
	// Output is the function's result, kept until the confirmation arrives.
	Output pipeline.Output `json:"output"`
	// Timer is the stream sequence of the token waiting out the timeout.
	Timer uint64 `json:"timer,omitempty"`
	// Included is set, for a function waiting for inclusion, once its
	// dispatch was included: the function can no longer fail.
	Included bool `json:"included,omitempty"`
}

// DueFallback is a function given up on whose fallback no worker has
// attempted yet.
type DueFallback struct {
	// Index is the function (for an atomic batch, the one that failed).
	Index int `json:"index"`
	// Exhausted is true when its retries ran out, false when its error was
	// not retryable.
	Exhausted bool `json:"exhausted"`
	// Reason is the failure that ends the batch if the fallback does not
	// handle it.
	Reason string `json:"reason"`
}

// Waiting says why no worker attempts a batch's next call, and since when.
type Waiting struct {
	// Reason names what is missing, e.g. "no worker serves `greet`".
	Reason string `json:"reason"`
	// Since is when the wait began.
	Since time.Time `json:"since"`
	// Type is the function type asked for (empty for an atomic unit).
	Type string `json:"type,omitempty"`
}

// ThrottleWindow is a domain's step budget in one second: how many steps
// its processors took in that second, against the limit the last of them
// to take one was given.
type ThrottleWindow struct {
	// Limit is the steps per second allowed, as the last writer was told.
	Limit int `json:"steps_per_second"`
	// Second is the window: a Unix time in seconds.
	Second int64 `json:"second"`
	// Used is how many steps were granted in that second.
	Used int `json:"used"`
}
