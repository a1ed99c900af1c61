package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// DLQRequest lists dead letters, optionally of one domain, from a sequence on.
type DLQRequest struct {
	// Domain, when set, lists that domain's dead letters only.
	Domain string `json:"domain,omitempty"`
	// From is the first DLQ sequence to list (0: from the first).
	From uint64 `json:"from,omitempty"`
	// Limit bounds the items listed: 1 to MaxDLQLimit; 0, or more than
	// MaxDLQLimit, lists DefaultDLQLimit.
	Limit int `json:"limit,omitempty"`
}

// Bounds of a dead-letter listing.
const (
	// DefaultDLQLimit is the items a DLQRequest without a limit gets.
	DefaultDLQLimit = 100
	// MaxDLQLimit is the largest limit of a DLQRequest.
	MaxDLQLimit = 1000
)

// DeadLetterItem summarises one dead letter.
type DeadLetterItem struct {
	// Seq is the dead letter's DLQ sequence: what replay and purge name.
	Seq uint64 `json:"seq"`
	// BatchID is the batch that failed.
	BatchID uint64 `json:"batch_id"`
	// Domain is the batch's domain.
	Domain string `json:"domain"`
	// Outcome is the batch's terminal outcome.
	Outcome pipeline.Outcome `json:"outcome"`
	// Error is the failure that ended the batch.
	Error string `json:"error"`
	// Attempts counts the batch's attempts.
	Attempts int `json:"attempts"`
	// Index is the function that failed.
	Index int `json:"index"`
	// At is when the batch was dead-lettered.
	At time.Time `json:"at"`
	// ReplayedAs is the batch that replays this dead letter, if any.
	ReplayedAs uint64 `json:"replayed_as,omitempty"`
}

// DLQReply is a page of dead letters.
type DLQReply struct {
	Items []DeadLetterItem `json:"items"`
}

// ReplayRequest replays one dead letter (Seq), or every one of a domain not
// replayed yet (All).
type ReplayRequest struct {
	// Seq is the DLQ sequence of the dead letter to replay.
	Seq uint64 `json:"seq,omitempty"`
	// Domain, with All, replays that domain's dead letters only.
	Domain string `json:"domain,omitempty"`
	// All replays every dead letter (of Domain, or of every domain) not
	// replayed yet.
	All bool `json:"all,omitempty"`
}

// Replayed links a dead letter to the new batch replaying it.
type Replayed struct {
	// Seq is the dead letter's DLQ sequence.
	Seq uint64 `json:"seq"`
	// From is the batch that failed.
	From uint64 `json:"from"`
	// AsNew is the new batch replaying it.
	AsNew uint64 `json:"as"`
}

// ReplayReply lists what was replayed.
type ReplayReply struct {
	Replayed []Replayed `json:"replayed"`
}

// PurgeRequest removes dead letters, for good: the one at Seq; every one
// (of Domain, or of every domain) with All; or, with OlderThan, those
// dead-lettered longer ago than that (of Domain, or of every domain).
type PurgeRequest struct {
	Seq       uint64            `json:"seq,omitempty"`
	Domain    string            `json:"domain,omitempty"`
	All       bool              `json:"all,omitempty"`
	OlderThan pipeline.Duration `json:"older_than,omitempty"`
}

// PurgeReply says how many dead letters were removed.
type PurgeReply struct {
	Purged uint64 `json:"purged"`
}
