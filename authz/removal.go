package authz

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// Removal: the owner's evict and a submitter's cancel finish a batch as
// RemovedByOwner wherever it stands, in one order:
//
//  1. its progress record, Done, written with compare-and-set: a processor
//     that reads it drops every token of the batch, and one stepping the
//     batch loses its next write;
//  2. its schedule, if it waits for its run_at, and its queue tokens,
//     deleted: a new batch's first token is stepped without reading
//     progress (one read saved per batch), so a token left in the queue
//     would run the batch (a processor that has taken it already may
//     finish the call it is making); a scheduled batch's progress is read
//     first, so a schedule that fired as it was removed does not run it;
//  3. its callback, deduplicated: authz records the outcome when it
//     applies it, frees the batch's slot and sender, and releases its key.
//
// A removal cut short after 1 is finished by doing 2 and 3 again: a
// repeated cancel of the batch does, and a key release that meets the
// batch as its key's head publishes its callback.

// markRemoved writes st, the progress of b read with its revision, as Done
// with RemovedByOwner for reason. It fails with streams.ErrConflict if the
// record moved on since it was read.
func (s *Service) markRemoved(ctx context.Context, b *pipeline.Batch, st *streams.ProgressEntry, reason string) error {
	o := pipeline.RemovedOutcome(st.Next)
	if reason != "" {
		o.Reason = reason
	}
	st.State, st.Parked, st.FallbackDue, st.Outcome, st.By = streams.Done, nil, nil, &o, streams.AuthzService
	return s.progressStore.Save(ctx, b.Domain, st)
}

// removed says whether progress st says its batch was removed by authz.
func removed(st *streams.ProgressEntry) bool {
	return st.State == streams.Done && st.Outcome != nil && st.Outcome.Status == pipeline.RemovedByOwner
}

// retireRemoved deletes the tokens of removed batch b at stream sequences
// seqs and publishes its callback, built from st (its Done progress).
// duplicate says a callback of the batch was published before: a
// processor's that finished it first, or this removal's, repeated.
func (s *Service) retireRemoved(ctx context.Context, b *pipeline.Batch, st *streams.ProgressEntry, seqs []uint64) (duplicate bool, err error) {
	// A scheduled batch's schedule first: one that fires now has its token
	// forwarded, and read by tokensOf's next scan or dropped by the
	// processor, which reads a scheduled batch's progress first.
	if err := s.unschedule(ctx, b); err != nil {
		return false, err
	}
	for _, seq := range seqs {
		if err := deleteToken(ctx, s.queues[b.Priority], seq); err != nil {
			return false, fmt.Errorf("authz: delete token %d of removed batch %d: %w", seq, b.ID, err)
		}
	}
	return s.publishCallback(ctx, removedCallback(b, st))
}

// deleteToken deletes the token at seq of queue stream st; a token gone
// already (acknowledged meanwhile) is no error. The server's answer to a
// delete of a missing message does not match jetstream.ErrMsgNotFound, so
// a failed delete is told from a missing message by reading it.
func deleteToken(ctx context.Context, st jetstream.Stream, seq uint64) error {
	err := st.DeleteMsg(ctx, seq)
	if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if _, gerr := st.GetMsg(ctx, seq); errors.Is(gerr, jetstream.ErrMsgNotFound) {
		return nil
	}
	return err
}

// removedCallback is the callback of removed batch b: the same every time
// it is built from the same progress, like its deduplication id.
func removedCallback(b *pipeline.Batch, st *streams.ProgressEntry) *streams.Callback {
	return &streams.Callback{BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Outcome: *st.Outcome,
		Attempts: st.Attempts(b.Subroutine.Mode == pipeline.Atomic), At: st.UpdatedAt, Processor: streams.AuthzService,
		Outputs: st.Outputs}
}

// tokensOf returns the stream sequences of every token of batch b in its
// queue, live or stale: one direct get per token of b's domain and
// priority queue.
func (s *Service) tokensOf(ctx context.Context, b *pipeline.Batch) ([]uint64, error) {
	st := s.queues[b.Priority]
	filter := streams.QueueFilter(b.Priority, b.Domain)
	var seqs []uint64
	for seq := uint64(1); ; {
		rm, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return seqs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("authz: read queue %s of %s: %w", b.Priority, b.Domain, err)
		}
		seq = rm.Sequence + 1
		if tok, err := streams.Decode[streams.Token](rm.Data); err == nil && tok.BatchID == b.ID {
			seqs = append(seqs, rm.Sequence)
		}
	}
}
