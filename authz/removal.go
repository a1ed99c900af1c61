package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
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

// remover finishes batches as RemovedByOwner: the owner's evict, a
// submitter's cancel, a keyed batch refused over its bound. It marks the
// progress, deletes the tokens, drops the schedule and publishes the
// callback that records the outcome.
type remover struct {
	js        jetstream.JetStream
	queues    map[pipeline.Priority]jetstream.Stream
	scheduled jetstream.Stream
	progress  *streams.ProgressStore
	store     *recordStore
	owner     string
	log       *slog.Logger
}

// markRemoved writes st, the progress of b read with its revision, as Done
// with RemovedByOwner for reason. It fails with streams.ErrConflict if the
// record moved on since it was read.
func (rv *remover) markRemoved(ctx context.Context, b *pipeline.Batch, st *streams.ProgressEntry, reason string) error {
	o := pipeline.RemovedOutcome(st.Next)
	if reason != "" {
		o.Reason = reason
	}
	st.State, st.Parked, st.FallbackDue, st.Outcome, st.By = records.Done, nil, nil, &o, streams.AuthzService
	return rv.progress.Save(ctx, b.Domain, st)
}

// removed says whether progress st says its batch was removed by authz.
func removed(st *streams.ProgressEntry) bool {
	return st.State == records.Done && st.Outcome != nil && st.Outcome.Status == pipeline.RemovedByOwner
}

// retireRemoved deletes the tokens of removed batch b at stream sequences
// seqs and publishes its callback, built from st (its Done progress).
// duplicate says a callback of the batch was published before: a
// processor's that finished it first, or this removal's, repeated.
func (rv *remover) retireRemoved(ctx context.Context, b *pipeline.Batch, st *streams.ProgressEntry, seqs []uint64) (duplicate bool, err error) {
	// A scheduled batch's schedule first: one that fires now has its token
	// forwarded, and read by tokensOf's next scan or dropped by the
	// processor, which reads a scheduled batch's progress first.
	if err := rv.unschedule(ctx, b); err != nil {
		return false, err
	}
	for _, seq := range seqs {
		if err := deleteToken(ctx, rv.queues[b.Priority], seq); err != nil {
			return false, fmt.Errorf("authz: delete token %d of removed batch %d: %w", seq, b.ID, err)
		}
	}
	return rv.publishCallback(ctx, removedCallback(b, st))
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
func removedCallback(b *pipeline.Batch, st *streams.ProgressEntry) *records.Callback {
	return &records.Callback{BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Outcome: *st.Outcome,
		Attempts: st.Attempts(b.Subroutine.Mode == pipeline.Atomic), At: st.UpdatedAt, Processor: streams.AuthzService,
		Outputs: st.Outputs}
}

// tokensOf returns the stream sequences of every token of batch b in its
// queue, live or stale: one direct get per token of b's domain and
// priority queue.
func (rv *remover) tokensOf(ctx context.Context, b *pipeline.Batch) ([]uint64, error) {
	st := rv.queues[b.Priority]
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
		if tok, err := records.Decode[records.Token](rm.Data); err == nil && tok.BatchID == b.ID {
			seqs = append(seqs, rm.Sequence)
		}
	}
}

// remove finishes the batch behind a live token as RemovedByOwner (see
// Removal): its progress, then the token, then its callback.
func (rv *remover) remove(ctx context.Context, domain string, it api.QueueItem) (uint64, error) {
	st, err := rv.progress.Load(ctx, domain, it.ID)
	if err != nil {
		return 0, err
	}
	if st.State == records.Done || st.Gen != it.Gen || st.Rotation != it.Rotation {
		return 0, streams.ErrConflict
	}
	rec, err := rv.store.record(ctx, it.ID)
	if err != nil {
		return 0, err
	}
	if err := refuseInclusionWait(&rec.Batch, &st.Progress, "evicted"); err != nil {
		return 0, err
	}
	if err := rv.markRemoved(ctx, &rec.Batch, st, ""); err != nil {
		return 0, err
	}
	dup, err := rv.retireRemoved(ctx, &rec.Batch, st, []uint64{it.Seq})
	if err != nil {
		return 0, err
	}
	if dup {
		// A processor finished the batch in the meantime (it was executing
		// when it was evicted): its outcome stands.
		return 0, errf(api.CodeConflict, "authz: batch %d finished before it could be evicted", it.ID)
	}
	return it.ID, nil
}

// publishCallback publishes a terminal callback; duplicate says another
// terminal callback of the batch was published first, and this one was dropped.
func (rv *remover) publishCallback(ctx context.Context, cb *records.Callback) (duplicate bool, err error) {
	m, err := streams.CallbackMsg(cb)
	if err != nil {
		return false, err
	}
	ack, err := rv.js.PublishMsg(ctx, m)
	if err != nil {
		return false, fmt.Errorf("authz: callback of batch %d: %w", cb.BatchID, err)
	}
	return ack.Duplicate, nil
}

// unschedule removes the schedule of b, if it has one that has not fired.
func (rv *remover) unschedule(ctx context.Context, b *pipeline.Batch) error {
	if b.RunAt.IsZero() {
		return nil
	}
	err := rv.scheduled.Purge(ctx, jetstream.WithPurgeSubject(streams.ScheduleSubject(b.Priority, b.Domain, b.ID)))
	if err != nil {
		return fmt.Errorf("authz: remove the schedule of batch %d: %w", b.ID, err)
	}
	return nil
}

// cancel finishes one of the caller's batches as RemovedByOwner wherever it
// stands, as the owner's evict does (see Removal), its tokens found by a
// scan of its queue. Batches that are not the caller's answer 404, as
// batches that do not exist do; the owner may cancel any. A repeated
// cancel answers as the first did, and finishes a removal cut short (its
// callback never published, say): nothing else would, for a batch without
// a token, such as one waiting behind its key's head.
func (rv *remover) cancel(ctx context.Context, user string, req *api.IDRequest) (any, error) {
	rec, err := rv.store.recordFor(ctx, req.ID, errf(api.CodeNotFound, "authz: no batch %d of yours", req.ID), func(b *pipeline.Batch) bool {
		return user == b.Submitter || user == rv.owner
	})
	if err != nil {
		return nil, err
	}
	b := &rec.Batch
	done := &api.CancelReply{ID: b.ID, Status: pipeline.RemovedByOwner}
	if rec.Status == pipeline.RemovedByOwner {
		return done, nil
	}
	if rec.Status.Terminal() {
		return nil, errf(api.CodeConflict, "authz: batch %d is already %s", req.ID, rec.Status)
	}
	finished := errf(api.CodeConflict, "authz: batch %d finished before it could be cancelled", req.ID)
	for range 10 {
		st, err := rv.progress.Load(ctx, b.Domain, b.ID)
		if err != nil {
			return nil, err
		}
		repeat := removed(st)
		if st.State == records.Done && !repeat {
			return nil, finished
		}
		if !repeat {
			if err := refuseInclusionWait(b, &st.Progress, "cancelled"); err != nil {
				return nil, err
			}
			if err := rv.markRemoved(ctx, b, st, "cancelled by "+user); errors.Is(err, streams.ErrConflict) {
				continue // a processor moved it meanwhile: look again
			} else if err != nil {
				return nil, err
			}
		}
		seqs, err := rv.tokensOf(ctx, b)
		if err != nil {
			return nil, err
		}
		dup, err := rv.retireRemoved(ctx, b, st, seqs)
		if err != nil {
			return nil, err
		}
		if dup && !repeat {
			// A processor finished it first, in a step that wrote no
			// progress record: its outcome stands.
			return nil, finished
		}
		if dup {
			// This removal's callback, or a processor's that finished the
			// batch before it: the record tells, once it is applied.
			if rec, err := rv.store.record(ctx, b.ID); err == nil && rec.Status.Terminal() && rec.Status != pipeline.RemovedByOwner {
				return nil, errf(api.CodeConflict, "authz: batch %d is already %s", req.ID, rec.Status)
			}
		}
		rv.log.Info("batch cancelled", "batch_id", b.ID, "domain", b.Domain, "by", user, "tokens", len(seqs), "repeat", repeat)
		return done, nil
	}
	return nil, errf(api.CodeConflict, "authz: batch %d kept changing; try again", req.ID)
}
