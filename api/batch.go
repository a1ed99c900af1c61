package api

import "github.com/tickflow/tickflow/pipeline"

// IDRequest names a batch.
type IDRequest struct {
	ID uint64 `json:"id"`
}

// BatchReply is a batch's record and, while it runs, its progress.
type BatchReply struct {
	Record   *BatchRecord `json:"record"`
	Progress *Progress    `json:"progress,omitempty"`
	// Outputs are the results of the functions that took effect, in
	// order: the record's once the batch finished, the progress's while it
	// runs (every function's but the one running).
	Outputs []pipeline.Output `json:"outputs"`
	// Scheduled says the batch waits for its run_at (Record.Batch.RunAt):
	// it has not started, and runs no earlier.
	Scheduled bool `json:"scheduled,omitempty"`
}

// Terminal says whether the batch finished: its record holds its outcome
// and outputs for good.
func (r *BatchReply) Terminal() bool {
	return r != nil && r.Record != nil && r.Record.Status.Terminal()
}

// ConfirmRequest confirms function Index of batch ID.
type ConfirmRequest struct {
	ID      uint64 `json:"id"`
	Index   int    `json:"index"`
	Content string `json:"content"`
	// Ref names the dispatch a confirmation of a function waiting for
	// inclusion is about: the Result.Ref its handler returned for the
	// round being confirmed. Other confirmations ignore it.
	Ref string `json:"ref,omitempty"`
}

// ConfirmReply acknowledges a confirmation stored for the processor.
type ConfirmReply struct {
	ID    uint64 `json:"id"`
	Index int    `json:"index"`
}

// CancelReply names the cancelled batch.
type CancelReply struct {
	ID     uint64          `json:"id"`
	Status pipeline.Status `json:"status"`
}
