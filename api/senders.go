package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// SendersRequest names the domain whose senders to list.
type SendersRequest struct {
	// Domain is the domain whose pool to list.
	Domain string `json:"domain"`
}

// SenderState is one sender of a domain's pool as the owner sees it.
type SenderState struct {
	// Name is the sender's name in the domain's pool.
	Name string `json:"name"`
	// State is SenderFree or SenderLeased.
	State SenderStatus `json:"state"`
	// Key is what the sender is bound to while leased: the batch's key,
	// or "batch <id>" for an unkeyed batch.
	Key string `json:"key,omitempty"`
	// Batch is the batch holding the sender.
	Batch uint64 `json:"batch,omitempty"`
	// Since is when the sender was leased, or freed.
	Since time.Time `json:"since"`
	// For is how long it has been so, when listed.
	For pipeline.Duration `json:"for"`
	// Processor is the replica that leased it.
	Processor string `json:"processor,omitempty"`
	// Submitter is who submitted the batch holding it: a submitter's
	// batches hold at most its share of the pool.
	Submitter string `json:"submitter,omitempty"`
}

// SenderStatus says whether a sender is leased to a batch.
type SenderStatus string

// Sender states in a SendersReply.
const (
	// SenderFree: no batch holds the sender.
	SenderFree SenderStatus = "free"
	// SenderLeased: a batch holds the sender until it ends.
	SenderLeased SenderStatus = "leased"
)

// SendersReply lists a domain's senders in the order they joined its pool.
type SendersReply struct {
	// Domain is the domain listed.
	Domain  string        `json:"domain"`
	Senders []SenderState `json:"senders"`
}
