package submit

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// IDsPerSequence is how many batch ids one message of the id log stands
// for: sequence s of the log is the block of ids [s×IDsPerSequence,
// s×IDsPerSequence + IDsPerSequence − 1].
const IDsPerSequence = 64

// IDs hands out batch ids from blocks reserved in the id log: one publish
// takes a sequence, and with it IDsPerSequence ids, so a replica pays one
// round trip for every IDsPerSequence ids instead of one for each. Every
// id still derives from its own sequence of the log, so ids are unique
// across replicas, and those of one IDs (one replica) increase. What a
// block changes: ids of different replicas interleave by block (a batch
// accepted later elsewhere may have a smaller id), and ids are not dense —
// the ids of a block not used up when its replica stops are never used,
// and an id taken for an idempotency key (AssignID) leaves the rest of its
// block unused. Ids written before blocks (the sequences themselves) are
// all below the first block's ids, since a block's first id is a later
// sequence times IDsPerSequence. Safe for concurrent use.
type IDs struct {
	js jetstream.JetStream

	mu         sync.Mutex
	next, last uint64 // the block in hand, [next, last]; empty when next > last
}

// NewIDs returns an IDs drawing blocks from the id log through js.
func NewIDs(js jetstream.JetStream) *IDs {
	return &IDs{js: js, next: 1}
}

// Next returns the next batch id, reserving a new block when the one in
// hand is used up.
func (r *IDs) Next(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next > r.last {
		first, _, err := AssignID(ctx, r.js, "")
		if err != nil {
			return 0, err
		}
		r.next, r.last = first, first+IDsPerSequence-1
	}
	id := r.next
	r.next++
	return id, nil
}
