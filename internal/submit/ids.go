package submit

import (
	"context"
	"sync"
	"time"

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
// the ids of a block not used up when its replica stops (and of the one
// reserved ahead) are never used, and an id AssignID takes with a
// deduplication key (a dead letter's replay) leaves the rest of its block
// unused. Ids written before blocks (the sequences themselves) are
// all below the first block's ids, since a block's first id is a later
// sequence times IDsPerSequence. Safe for concurrent use.
type IDs struct {
	js jetstream.JetStream

	mu         sync.Mutex
	next, last uint64 // the block in hand, [next, last]; empty when next > last
	// spare is the first id of the block reserved ahead (0: none), and
	// ahead is closed when the reservation on its way ends (nil: none).
	spare uint64
	ahead chan struct{}
}

// reserveAheadTimeout bounds a reservation made ahead; one that fails is
// made again, by the caller that needs it, when the block in hand is used
// up.
const reserveAheadTimeout = 10 * time.Second

// NewIDs returns an IDs drawing blocks from the id log through js.
func NewIDs(js jetstream.JetStream) *IDs {
	return &IDs{js: js, next: 1}
}

// Next returns the next batch id. Once half of the block in hand is
// handed out, the next block is reserved in the background, so that
// callers do not queue behind a round trip every IDsPerSequence ids; only
// the first call, or one that finds no block in hand or on its way,
// reserves one itself.
func (r *IDs) Next(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	for r.next > r.last {
		if r.spare != 0 {
			r.next, r.last, r.spare = r.spare, r.spare+IDsPerSequence-1, 0
			break
		}
		if ahead := r.ahead; ahead != nil {
			r.mu.Unlock()
			select {
			case <-ahead:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			r.mu.Lock()
			continue
		}
		first, _, err := AssignID(ctx, r.js, "")
		if err != nil {
			r.mu.Unlock()
			return 0, err
		}
		r.next, r.last = first, first+IDsPerSequence-1
	}
	id := r.next
	r.next++
	if r.next+IDsPerSequence/2 > r.last && r.spare == 0 && r.ahead == nil {
		r.reserveAhead()
	}
	r.mu.Unlock()
	return id, nil
}

// reserveAhead reserves the next block in the background; r.mu is held.
// Reservations of one IDs never overlap (one ahead, or one by a caller
// when none is ahead), so each block is later in the log than the one
// before it, and the ids of one IDs increase.
func (r *IDs) reserveAhead() {
	done := make(chan struct{})
	r.ahead = done
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), reserveAheadTimeout)
		first, _, err := AssignID(ctx, r.js, "")
		cancel()
		r.mu.Lock()
		if err == nil {
			r.spare = first
		}
		r.ahead = nil
		r.mu.Unlock()
		close(done)
	}()
}
