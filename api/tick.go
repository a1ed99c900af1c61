package api

import "github.com/tickflow/tickflow/pipeline"

// TickReport says what one tick of a domain's processor did: the answer
// to a tick request (ticker.Request), as JSON.
type TickReport struct {
	// Domain is the domain ticked.
	Domain string `json:"domain"`
	// Status says how the tick went.
	Status TickStatus `json:"status"`
	// Error is why the tick failed, when Status is TickError.
	Error string `json:"error,omitempty"`
	// Steps are the steps the tick ran, one per batch it moved.
	Steps []StepReport `json:"steps,omitempty"`
}

// StepReport says what one step did to one batch.
type StepReport struct {
	// BatchID is the batch stepped.
	BatchID uint64 `json:"batch_id"`
	// Priority is the queue its token came from.
	Priority pipeline.Priority `json:"priority"`
	// Action is what the step did to it.
	Action Action `json:"action"`
	// Outcome is the batch's outcome, when the step finished it.
	Outcome string `json:"outcome,omitempty"`
	// Error is why the step failed, when it did.
	Error string `json:"error,omitempty"`
}

// TickStatus says how a tick went, as its report says it.
type TickStatus string

// The statuses of a tick.
const (
	// TickOK: the tick ran its steps.
	TickOK TickStatus = "ok"
	// TickPaused: the domain is paused; the tick ran no step.
	TickPaused TickStatus = "paused"
	// TickNoMessages: no token was due; the tick ran no step.
	TickNoMessages TickStatus = "no messages"
	// TickThrottled: the domain's throttle allowed no step this second,
	// so the tick ran none.
	TickThrottled TickStatus = "throttled"
	// TickError: the tick failed (the report's Error says why).
	TickError TickStatus = "error"
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
