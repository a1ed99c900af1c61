package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// InFlightRequest lists a domain's unfinished batches, oldest first.
type InFlightRequest struct {
	Domain string `json:"domain"`
	// Limit bounds the items answered: 1 to MaxInFlight, 0 for
	// DefaultInFlight.
	Limit int `json:"limit,omitempty"`
	// Total asks for the count of the domain's unfinished batches, and for
	// the Limit oldest of them all: both queues are then read to their end
	// (at most 10000 tokens each). Without it each queue is read
	// from its front only until Limit+1 of its batches are found, so a
	// listing costs about 2×Limit reads however deep the queues are.
	Total bool `json:"total,omitempty"`
}

// Bounds of an in-flight listing.
const (
	// DefaultInFlight is the items an InFlightRequest without a limit gets.
	DefaultInFlight = 100
	// MaxInFlight is the largest limit of an InFlightRequest.
	MaxInFlight = 1000
)

// InFlightItem is one unfinished batch: where it stands and who moved it
// last.
type InFlightItem struct {
	ID        uint64            `json:"id"`
	Label     string            `json:"label"`
	Submitter string            `json:"submitter"`
	Priority  pipeline.Priority `json:"priority"`
	// Position is the batch's place in its queue; for a scheduled batch,
	// its place among the queue's scheduled batches (QueueReply.Scheduled).
	Position int `json:"position"`
	// State is queued (waiting, running or waiting on a retry delay),
	// parked (waiting for a confirmation) or scheduled (waiting for its
	// RunAt, not in the queue yet).
	State State `json:"state"`
	// RunAt is when a scheduled batch runs.
	RunAt time.Time `json:"run_at,omitzero"`
	// Next is the function that runs next, of Functions.
	Next      int `json:"next"`
	Functions int `json:"functions"`
	// Rotations counts the batch's trips to the back of its queue.
	Rotations uint32 `json:"rotations"`
	Attempts  int    `json:"attempts"`
	// Holder is the processor replica that moved the batch last (wrote its
	// progress), Since when; empty while no processor has moved it, and
	// Since is then when it was accepted.
	Holder    string    `json:"holder,omitempty"`
	Since     time.Time `json:"since"`
	CreatedAt time.Time `json:"created_at"`
	// AgeMS is the time since the batch was accepted, in milliseconds.
	AgeMS int64 `json:"age_ms"`
	// NotBefore is when a batch waiting on a retry delay runs again.
	NotBefore time.Time `json:"not_before,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// Waiting says why no worker attempts the batch's next call, and
	// since when (e.g. no worker serves its function type).
	Waiting *Waiting `json:"waiting,omitempty"`
}

// InFlightReply lists a domain's unfinished batches, oldest first.
type InFlightReply struct {
	Domain string         `json:"domain"`
	Items  []InFlightItem `json:"items"`
	// Total counts the domain's unfinished batches: set only when the
	// request asked for it and both queues were read to their end.
	Total *int `json:"total,omitempty"`
	// More says the domain has unfinished batches beyond Items: at least
	// one more was found, or a queue held more tokens than one listing
	// reads. Without More, Items are all of them.
	More bool `json:"more,omitempty"`
}
