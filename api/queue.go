package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// QueueRequest lists a domain's queue of one priority, positions [From, To).
type QueueRequest struct {
	// Domain and Priority name the queue.
	Domain   string            `json:"domain"`
	Priority pipeline.Priority `json:"priority"`
	// From is the first position listed, from 0.
	From int `json:"from"`
	// To is exclusive; 0 means the end of the queue.
	To int `json:"to"`
}

// QueueItem is one batch in a queue.
type QueueItem struct {
	// Position is the batch's place in the queue, from 0.
	Position int `json:"position"`
	// ID is the batch.
	ID uint64 `json:"id"`
	// Seq and Subject are its token's stream sequence and subject.
	Seq     uint64 `json:"seq"`
	Subject string `json:"subject"`
	// Gen counts the batch's moves by the owner; Rotation its trips to
	// the back of the queue.
	Gen      uint32 `json:"gen"`
	Rotation uint32 `json:"step"`
	// State is queued, parked (waiting for a confirmation) or scheduled.
	State State `json:"state"`
	// Key is the batch's key, when it has one and its token carries the
	// batch: the batch is its key's head (the others wait without a token).
	Key string `json:"key,omitempty"`
	// RunAt is when a scheduled batch runs (State scheduled).
	RunAt time.Time `json:"run_at,omitzero"`
}

// QueueReply is a slice of a queue.
type QueueReply struct {
	// Domain and Priority name the queue.
	Domain   string            `json:"domain"`
	Priority pipeline.Priority `json:"priority"`
	// Length counts the queue's live batches, listed or not.
	Length int `json:"length"`
	// Items are the positions asked for.
	Items []QueueItem `json:"items"`
	// Scheduled lists the batches that wait for their run_at, soonest
	// first: not in the queue yet, they join its back when their time
	// comes. Their Position is their place in this list, which evict takes
	// with scheduled set.
	Scheduled []QueueItem `json:"scheduled"`
}

// PositionRequest names a position in a domain's queue.
type PositionRequest struct {
	// Domain, Priority and Position name the queue and the place in it.
	Domain   string            `json:"domain"`
	Priority pipeline.Priority `json:"priority"`
	Position int               `json:"position"`
	// Scheduled makes Position a place in the queue's scheduled batches
	// (QueueReply.Scheduled) instead: evict removes a batch before its
	// run_at.
	Scheduled bool `json:"scheduled,omitempty"`
}

// EvictReply names the evicted batch.
type EvictReply struct {
	// ID is the batch evicted: it finishes as RemovedByOwner.
	ID uint64 `json:"id"`
}

// InsertRequest inserts a new batch at a position of a domain's queue.
type InsertRequest struct {
	// Domain, Priority and Position name the queue and the place in it.
	Domain   string            `json:"domain"`
	Priority pipeline.Priority `json:"priority"`
	Position int               `json:"position"`
	// Label gives the execution settings; its domain must be Domain.
	Label string `json:"label"`
	// Functions are the batch's functions, in order.
	Functions Calls `json:"functions"`
	// Key, when set, serialises the batch with the others of its key.
	Key string `json:"key,omitempty"`
}

// InsertReply names the inserted batch.
type InsertReply struct {
	// ID is the new batch; Position, its place in the queue.
	ID       uint64 `json:"id"`
	Position int    `json:"position"`
	// WaitsForKey says the batch carries a key with earlier batches still
	// waiting: it joined the back of its key's order, the queue is as it
	// was, and the batch is queued at the back when it becomes its key's
	// head (Position is then meaningless).
	WaitsForKey bool `json:"waits_for_key,omitempty"`
}
