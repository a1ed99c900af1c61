package submit

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/tickflow/tickflow/streams"
)

// Headers of a JetStream atomic batch publish (nats.go has no helper).
const (
	hdrBatchID     = "Nats-Batch-Id"
	hdrBatchSeq    = "Nats-Batch-Sequence"
	hdrBatchCommit = "Nats-Batch-Commit"
)

// DefaultIDBlock is how many batch ids an IDs reserves at a time.
const DefaultIDBlock = 64

// IDs hands out batch ids from blocks reserved in the id log: one atomic
// batch of n messages gets n consecutive sequences in one round trip, and
// those are the next n ids. Every id is still a sequence of the id log, so
// ids stay unique across replicas, and those of one IDs (one replica)
// increase. What a block changes: ids of different replicas interleave by
// block (a batch accepted later elsewhere may have a smaller id), and the
// ids of a block not used up when its replica stops are never used (gaps).
// An id for an idempotency key still comes from AssignID, which the log
// deduplicates. Safe for concurrent use.
type IDs struct {
	js    jetstream.JetStream
	block int

	mu         sync.Mutex
	next, last uint64 // the block in hand, [next, last]; empty when next > last
}

// NewIDs returns an IDs reserving block ids at a time (DefaultIDBlock when
// block < 1). The id log must allow atomic batch publishes (streams.Provision).
func NewIDs(js jetstream.JetStream, block int) *IDs {
	if block < 1 {
		block = DefaultIDBlock
	}
	return &IDs{js: js, block: block, next: 1}
}

// Next returns the next batch id, reserving a new block when the one in
// hand is used up.
func (r *IDs) Next(ctx context.Context) (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.next > r.last {
		last, err := reserve(ctx, r.js, r.block)
		if err != nil {
			return 0, err
		}
		r.next, r.last = last-uint64(r.block)+1, last
	}
	id := r.next
	r.next++
	return id, nil
}

// reserve publishes n messages to the id log as one atomic batch: they are
// stored together, at consecutive sequences, and the commit's PubAck names
// the last.
func reserve(ctx context.Context, js jetstream.JetStream, n int) (last uint64, err error) {
	batch := nuid.Next()
	nc := js.Conn()
	for i := 1; i <= n; i++ {
		m := nats.NewMsg(streams.IDsSubject)
		m.Header.Set(hdrBatchID, batch)
		m.Header.Set(hdrBatchSeq, strconv.Itoa(i))
		if i < n {
			if err := nc.PublishMsg(m); err != nil {
				return 0, fmt.Errorf("submit: reserve batch ids: %w", err)
			}
			continue
		}
		m.Header.Set(hdrBatchCommit, "1")
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			return 0, fmt.Errorf("submit: reserve batch ids: %w", err)
		}
		return ack.Sequence, nil
	}
	return 0, fmt.Errorf("submit: reserve %d batch ids: expected at least 1", n)
}
