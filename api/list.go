package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// Bounds of a listing of one's own batches.
const (
	// DefaultListLimit is the page size of a ListRequest without a limit.
	DefaultListLimit = 50
	// MaxListLimit is the largest page size of a ListRequest.
	MaxListLimit = 500
)

// ListRequest pages through the caller's batches, newest first.
type ListRequest struct {
	// Status, when set, keeps only batches in that status (InProcess,
	// Executed, Rejected, PartiallyExecuted, RemovedByOwner, Expired).
	Status pipeline.Status `json:"status,omitempty"`
	// Before is the cursor: 0 for the newest, else the previous page's
	// Next, as it was (a position in the listing, not a batch id).
	Before uint64 `json:"before,omitempty"`
	// Limit is the page size: 1 to MaxListLimit, 0 for DefaultListLimit.
	Limit int `json:"limit,omitempty"`
	// Submitter lists another user's batches: the owner only.
	Submitter string `json:"submitter,omitempty"`
}

// BatchSummary is one line of a listing.
type BatchSummary struct {
	ID        uint64            `json:"id"`
	Label     string            `json:"label"`
	Domain    string            `json:"domain"`
	Priority  pipeline.Priority `json:"priority"`
	Status    pipeline.Status   `json:"status"`
	Outcome   string            `json:"outcome,omitempty"`
	Attempts  int               `json:"attempts"`
	Functions int               `json:"functions"`
	// DeadLetter is the DLQ sequence of the batch's dead letter, if any.
	DeadLetter uint64    `json:"dead_letter,omitempty"`
	ReplayOf   uint64    `json:"replay_of,omitempty"`
	ReplayedAs uint64    `json:"replayed_as,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	// RunAt is when a scheduled batch runs, or ran.
	RunAt time.Time `json:"run_at,omitzero"`
	// Scheduled says the batch waits for its RunAt (InProcess, RunAt
	// ahead).
	Scheduled bool `json:"scheduled,omitempty"`
}

// ListReply is a page of batches, newest first.
type ListReply struct {
	Items []BatchSummary `json:"items"`
	// Next is the cursor of the next page (its Before); 0 when there is none.
	Next uint64 `json:"next,omitempty"`
}
