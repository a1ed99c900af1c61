package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
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
	Progress State `json:"progress,omitempty"`
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
