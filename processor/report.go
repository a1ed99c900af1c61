package processor

import "github.com/tickflow/tickflow/pipeline"

// Report says what one tick did.
type Report struct {
	Domain string `json:"domain"`
	// Status is StatusOK, StatusPaused, StatusNoMessages, StatusThrottled
	// or StatusError.
	Status string       `json:"status"`
	Error  string       `json:"error,omitempty"`
	Steps  []StepReport `json:"steps,omitempty"`
}

// StepReport says what one step did to one batch.
type StepReport struct {
	BatchID  uint64            `json:"batch_id"`
	Priority pipeline.Priority `json:"priority"`
	Action   Action            `json:"action"`
	Outcome  string            `json:"outcome,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// Report statuses.
const (
	StatusOK         = "ok"
	StatusPaused     = "paused"
	StatusNoMessages = "no messages"
	// StatusThrottled: the domain's throttle allowed no step this second
	// (Options.Throttle), so the tick ran none.
	StatusThrottled = "throttled"
	StatusError     = "error"
)

// Action is what one step did to its batch, as a tick report says it.
type Action string

// The actions of a step.
const (
	// ActionRotated: a function of a non-atomic batch took effect and the
	// batch went to the back of its queue.
	ActionRotated Action = "rotated"
	// ActionRetry: the function (or unit) failed and waits for its retry.
	ActionRetry Action = "retry"
	// ActionParked: the function took effect and waits for a confirmation.
	ActionParked Action = "parked"
	// ActionFinished: the batch reached its terminal outcome.
	ActionFinished Action = "finished"
	// ActionStale: the token was superseded (or its batch is finished) and
	// was dropped.
	ActionStale Action = "stale"
	// ActionSetAside: the batch is not executable yet (it waits for a sender
	// of the domain's pool) and comes back after a delay.
	ActionSetAside Action = "set-aside"
	// ActionDelayed: the batch waits for a retry delay to pass.
	ActionDelayed Action = "delayed"
	// ActionBusy: no worker attempted the call; tried again later, no
	// attempt counted.
	ActionBusy Action = "busy"
	// ActionHeld: the token cannot be reconciled with its records yet;
	// tried again later, a bounded number of times.
	ActionHeld Action = "held"
	// ActionAbandoned: the step stopped at an injected fault (tests).
	ActionAbandoned Action = "abandoned"
	// ActionError: the step failed and its token is redelivered shortly.
	ActionError Action = "error"
)
