package authz

import (
	"context"
	"sort"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/senderlease"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// maxKeyBytes is the longest key a batch may carry (pipeline's rule).
const maxKeyBytes = 128

// list answers the owner's keys listing: a domain's keys, each one's running
// batch and how many wait.
func (ko *keyOrders) list(ctx context.Context, _ string, req *api.KeysRequest) (any, error) {
	if err := pipeline.ValidateDomain(req.Domain); err != nil {
		return nil, err
	}
	limit, err := pageLimit(req.Limit, api.DefaultKeysLimit, api.MaxKeysLimit)
	if err != nil {
		return nil, err
	}
	var qs []records.KeyQueue
	if len(req.Key) > maxKeyBytes {
		return nil, errf(api.CodeBadRequest, "authz: key must be at most %d bytes (got %d)", maxKeyBytes, len(req.Key))
	}
	if req.Key != "" {
		q, err := ko.order.Load(ctx, req.Domain, req.Key)
		if err != nil {
			return nil, err
		}
		if q.Head() != 0 {
			qs = append(qs, q)
		}
		req.After = ""
	} else if qs, err = ko.order.List(ctx, req.Domain); err != nil {
		return nil, err
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Key < qs[j].Key })
	rep := &api.KeysReply{Domain: req.Domain, Keys: []api.KeyState{}}
	now := ko.now()
	pool, err := senderlease.Load(ctx, ko.senders, req.Domain)
	if err != nil {
		return nil, err
	}
	bound := make(map[uint64]string, len(pool.Senders))
	for _, sd := range pool.Senders {
		if !sd.Free() {
			bound[sd.Batch] = sd.Name
		}
	}
	for _, q := range qs {
		if req.After != "" && q.Key <= req.After {
			continue
		}
		if len(rep.Keys) == limit {
			rep.More = true
			break
		}
		ks, err := ko.keyState(ctx, &q, now)
		if err != nil {
			return nil, err
		}
		ks.Sender = bound[ks.Head]
		if req.Key != "" {
			for i, id := range q.IDs[:min(len(q.IDs), limit)] {
				ks.Batches = append(ks.Batches, api.KeyBatch{ID: id, Submitter: q.SubmitterOf(i)})
			}
		}
		rep.Keys = append(rep.Keys, ks)
	}
	return rep, nil
}

// keyState describes one key from its order, its head's record and its
// head's progress.
func (ko *keyOrders) keyState(ctx context.Context, q *records.KeyQueue, now time.Time) (api.KeyState, error) {
	ks := api.KeyState{Key: q.Key, Head: q.Head(), Since: q.HeadSince, For: now.Sub(q.HeadSince).Seconds(), Waiting: len(q.IDs) - 1}
	rec, err := ko.store.record(ctx, ks.Head)
	if err != nil {
		return ks, err
	}
	ks.Priority, ks.Submitter = rec.Batch.Priority, rec.Batch.Submitter
	for i := 1; i < len(q.IDs); i++ {
		if ks.WaitingBy == nil {
			ks.WaitingBy = map[string]int{}
		}
		ks.WaitingBy[q.SubmitterOf(i)]++
	}
	st, err := ko.progress.Load(ctx, q.Domain, ks.Head)
	if err != nil {
		return ks, err
	}
	if st.Rev != 0 {
		ks.Progress = api.State(st.State)
	}
	ks.State, ks.Queue = sequencerState(rec, st, now)
	if ks.State == api.TxnRetry {
		ks.Attempts = st.FailuresOf(currentFunction(&rec.Batch, &st.Progress))
		ks.LastError = st.LastError
	}
	return ks, nil
}

// currentFunction is the function whose failures count for the head: the
// next one of a non-atomic batch, the unit (0) of an atomic one.
func currentFunction(b *pipeline.Batch, p *records.Progress) int {
	if b.Subroutine.Mode == pipeline.Atomic {
		return 0
	}
	return p.Next
}

// sequencerState maps a head's record and progress to the sequencer's
// batch and key states.
func sequencerState(rec *records.BatchRecord, st *streams.ProgressEntry, now time.Time) (api.TxnState, api.QueueState) {
	p := &st.Progress
	terminal := func(s pipeline.Status) (api.TxnState, api.QueueState) {
		if s == pipeline.Executed {
			return api.TxnDone, api.QueueFree
		}
		return api.TxnFailed, api.QueueFree
	}
	switch {
	case rec.Status.Terminal():
		return terminal(rec.Status)
	case p.State == records.Done && p.Outcome != nil:
		return terminal(p.Outcome.Status)
	case p.State == records.Parked:
		return api.TxnRevision, api.QueueWaitingInclusion
	case p.FallbackDue != nil:
		return api.TxnRetry, api.QueueRetry
	case p.FailuresOf(currentFunction(&rec.Batch, p)) > 0 && p.NotBefore.After(now):
		return api.TxnRetry, api.QueueDelay
	case p.FailuresOf(currentFunction(&rec.Batch, p)) > 0:
		return api.TxnRetry, api.QueueRetry
	case p.Next == 0:
		return api.TxnWaiting, api.QueueFree
	}
	return api.TxnWaiting, api.QueueBlocked
}
