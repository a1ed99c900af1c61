package authz

import (
	"context"
	"sort"
	"time"

	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// TxnState is a key's running batch in the sequencer's words.
type TxnState string

// Batch states in the sequencer's words (docs/api.md maps them).
const (
	// TxnWaiting: not attempted yet, or between functions with none failing.
	TxnWaiting TxnState = "WAITING"
	// TxnRevision: a function took effect and waits for its confirmation
	// (inclusion).
	TxnRevision TxnState = "REVISION"
	// TxnRetry: a function failed and will be tried again.
	TxnRetry TxnState = "RETRY"
	// TxnDone: executed; its key is being released.
	TxnDone TxnState = "DONE"
	// TxnFailed: finished otherwise (dead-lettered, partially executed,
	// expired, evicted); its key is being released.
	TxnFailed TxnState = "FAILED"
)

// QueueState is a key in the sequencer's words for a queue and its sender.
type QueueState string

// Key states in the sequencer's words (docs/api.md maps them).
const (
	// QueueFree: nothing of the key has started (its head waits for its
	// turn in the queue), or its head just finished.
	QueueFree QueueState = "FREE"
	// QueueBlocked: the head started (a function took effect, or a sender
	// is bound to the key) and holds the key.
	QueueBlocked QueueState = "BLOCKED"
	// QueueInclusion: dispatched, the wait for inclusion not started yet.
	// tickflow parks a function in the step that ran it, so a key is never
	// seen in this state; it is listed for the mapping's sake.
	QueueInclusion QueueState = "INCLUSION"
	// QueueWaitingInclusion: the head's function waits for its
	// confirmation (inclusion), until its deadline.
	QueueWaitingInclusion QueueState = "WAITING_INCLUSION"
	// QueueRetry: the head's function failed and is due again (or its
	// fallback waits for a worker).
	QueueRetry QueueState = "RETRY"
	// QueueDelay: the head's function failed and waits out its backoff.
	QueueDelay QueueState = "DELAY"
)

// KeysRequest lists the keys of a domain with a batch waiting.
type KeysRequest struct {
	Domain string `json:"domain"`
	// Key, when set, lists that key alone, with the batches of its order
	// (KeyState.Batches); After is then ignored.
	Key string `json:"key,omitempty"`
	// After, when set, lists only the keys after it in byte order: the next
	// page after a reply with More.
	After string `json:"after,omitempty"`
	// Limit bounds the keys listed; 0 means DefaultKeysLimit, at most
	// MaxKeysLimit.
	Limit int `json:"limit,omitempty"`
}

// Limits of KeysRequest.Limit.
const (
	// DefaultKeysLimit is the page size when KeysRequest.Limit is 0.
	DefaultKeysLimit = 100
	// MaxKeysLimit is the largest page: each key listed costs two reads.
	MaxKeysLimit = 1000
)

// maxKeyBytes is the longest key a batch may carry (pipeline's rule).
const maxKeyBytes = 128

// KeyState is one key: its running batch (the head) and how many wait
// behind it.
type KeyState struct {
	Key string `json:"key"`
	// Head is the key's running batch: the only one of the key with a
	// queue token.
	Head     uint64            `json:"head"`
	Priority pipeline.Priority `json:"priority,omitempty"`
	// State is the head in the sequencer's words.
	State TxnState `json:"state"`
	// Queue is the key in the sequencer's words.
	Queue QueueState `json:"queue"`
	// Progress is the head's state in tickflow's words: queued, parked or
	// done ("" before its first step).
	Progress streams.State `json:"progress,omitempty"`
	// Attempts are the failed attempts of the head's current function (an
	// atomic batch: of its unit).
	Attempts int `json:"attempts,omitempty"`
	// LastError is the head's last failure, while it retries.
	LastError string `json:"last_error,omitempty"`
	// Since is when the head became the head; For is how long ago that
	// was, in seconds.
	Since time.Time `json:"since"`
	For   float64   `json:"for_s"`
	// Waiting counts the batches of the key behind the head.
	Waiting int `json:"waiting"`
	// Sender is the sender leased to the key's head while it runs, empty
	// when it holds none.
	Sender string `json:"sender,omitempty"`
	// Submitter is the head's submitter.
	Submitter string `json:"submitter"`
	// WaitingBy counts the batches behind the head by submitter ("" for
	// one listed before submitters were kept).
	WaitingBy map[string]int `json:"waiting_by,omitempty"`
	// Batches, only when the request names the key, are the batches of its
	// order, the head first, at most the request's limit: the owner
	// cancels one by its id.
	Batches []KeyBatch `json:"batches,omitempty"`
}

// KeyBatch is one batch of a key's order and who submitted it.
type KeyBatch struct {
	ID        uint64 `json:"id"`
	Submitter string `json:"submitter"`
}

// KeysReply is a page of a domain's keys, in byte order.
type KeysReply struct {
	Domain string     `json:"domain"`
	Keys   []KeyState `json:"keys"`
	// More says further keys wait: ask again with After set to the last
	// key listed.
	More bool `json:"more,omitempty"`
}

func (s *Service) keys(ctx context.Context, _ string, req *KeysRequest) (any, error) {
	if err := pipeline.ValidateDomain(req.Domain); err != nil {
		return nil, err
	}
	limit, err := pageLimit(req.Limit, DefaultKeysLimit, MaxKeysLimit)
	if err != nil {
		return nil, err
	}
	var qs []streams.KeyQueue
	if len(req.Key) > maxKeyBytes {
		return nil, errf(CodeBadRequest, "authz: key must be at most %d bytes (got %d)", maxKeyBytes, len(req.Key))
	}
	if req.Key != "" {
		q, err := s.keyOrder.Load(ctx, req.Domain, req.Key)
		if err != nil {
			return nil, err
		}
		if q.Head() != 0 {
			qs = append(qs, q)
		}
		req.After = ""
	} else if qs, err = s.keyOrder.List(ctx, req.Domain); err != nil {
		return nil, err
	}
	sort.Slice(qs, func(i, j int) bool { return qs[i].Key < qs[j].Key })
	rep := &KeysReply{Domain: req.Domain, Keys: []KeyState{}}
	now := s.opts.Now()
	pool, err := streams.LoadSenders(ctx, s.senders, req.Domain)
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
		ks, err := s.keyState(ctx, &q, now)
		if err != nil {
			return nil, err
		}
		ks.Sender = bound[ks.Head]
		if req.Key != "" {
			for i, id := range q.IDs[:min(len(q.IDs), limit)] {
				ks.Batches = append(ks.Batches, KeyBatch{ID: id, Submitter: q.SubmitterOf(i)})
			}
		}
		rep.Keys = append(rep.Keys, ks)
	}
	return rep, nil
}

// keyState describes one key from its order, its head's record and its
// head's progress.
func (s *Service) keyState(ctx context.Context, q *streams.KeyQueue, now time.Time) (KeyState, error) {
	ks := KeyState{Key: q.Key, Head: q.Head(), Since: q.HeadSince, For: now.Sub(q.HeadSince).Seconds(), Waiting: len(q.IDs) - 1}
	rec, err := s.record(ctx, ks.Head)
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
	st, err := s.progressStore.Load(ctx, q.Domain, ks.Head)
	if err != nil {
		return ks, err
	}
	if st.Rev != 0 {
		ks.Progress = st.State
	}
	ks.State, ks.Queue = sequencerState(rec, st, now)
	if ks.State == TxnRetry {
		ks.Attempts = st.FailuresOf(currentFunction(&rec.Batch, &st.Progress))
		ks.LastError = st.LastError
	}
	return ks, nil
}

// currentFunction is the function whose failures count for the head: the
// next one of a non-atomic batch, the unit (0) of an atomic one.
func currentFunction(b *pipeline.Batch, p *streams.Progress) int {
	if b.Subroutine.Mode == pipeline.Atomic {
		return 0
	}
	return p.Next
}

// sequencerState maps a head's record and progress to the sequencer's
// batch and key states.
func sequencerState(rec *streams.BatchRecord, st *streams.ProgressEntry, now time.Time) (TxnState, QueueState) {
	p := &st.Progress
	terminal := func(s pipeline.Status) (TxnState, QueueState) {
		if s == pipeline.Executed {
			return TxnDone, QueueFree
		}
		return TxnFailed, QueueFree
	}
	switch {
	case rec.Status.Terminal():
		return terminal(rec.Status)
	case p.State == streams.Done && p.Outcome != nil:
		return terminal(p.Outcome.Status)
	case p.State == streams.Parked:
		return TxnRevision, QueueWaitingInclusion
	case p.FallbackDue != nil:
		return TxnRetry, QueueRetry
	case p.FailuresOf(currentFunction(&rec.Batch, p)) > 0 && p.NotBefore.After(now):
		return TxnRetry, QueueDelay
	case p.FailuresOf(currentFunction(&rec.Batch, p)) > 0:
		return TxnRetry, QueueRetry
	case p.Next == 0:
		return TxnWaiting, QueueFree
	}
	return TxnWaiting, QueueBlocked
}
