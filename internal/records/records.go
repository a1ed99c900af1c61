package records

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tickflow/tickflow/internal/wire"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// WireVersion is the version every record this build writes carries. A
// reader rejects records of a newer version with ErrVersion.
const WireVersion = 1

// Token is a queue message: a pointer to a batch, never the batch itself.
// A token whose generation or step is behind the batch's progress is stale
// and is dropped: this is what makes redelivery, rotation and
// insert-at-position safe.
type Token struct {
	V       uint8  `msgpack:"v"`
	BatchID uint64 `msgpack:"id"`
	// Gen is bumped by authz when it moves the batch to another position.
	Gen uint32 `msgpack:"gen"`
	// Rotation is bumped by a processor each time it rotates the batch to
	// the back of its queue (wire name "step").
	Rotation uint32 `msgpack:"step"`
	// Batch, when set, is a copy of the batch's content, which never
	// changes, so a processor need not read the record; left out of tokens
	// of large batches (streams.TokenMsg). Only authz (new tokens) and processors
	// (rotations) may publish tokens, so the copy is as trusted as the record.
	Batch *pipeline.Batch `msgpack:"batch,omitempty"`
	// Again marks a batch's first token (generation and rotation 0)
	// published by a path that may publish it beside one stored before (a
	// repeat, the repair loop, authz's start, a key's head): its step
	// reads the batch's progress even on the token's first delivery, since
	// a first step that failed left no completion record to answer a
	// second call. A send's own first publish goes without it (within
	// submit.FreshTokenWithin of the record).
	Again bool `msgpack:"again,omitempty"`
}

// State is where a batch's execution stands in its progress record.
type State string

// Progress states.
const (
	// Queued: waiting for its turn in the queue.
	Queued State = "queued"
	// Parked: function Parked.Index executed and waits for a confirmation.
	Parked State = "parked"
	// Done: terminal; Outcome is set and the callback was published.
	Done State = "done"
	// Scheduled: waiting for its run_at, with no token in a queue yet. A
	// listing's state only: never written in a progress record.
	Scheduled State = "scheduled"
)

// ParkedFunction is the function waiting for its confirmation.
type ParkedFunction struct {
	Index    int       `msgpack:"index" json:"index"`
	Deadline time.Time `msgpack:"deadline" json:"deadline"`
	// Output is the function's result, kept until the confirmation arrives.
	Output pipeline.Output `msgpack:"output" json:"output"`
	// Timer is the stream sequence of the token waiting out the timeout,
	// deleted once a confirmation settles the function.
	Timer uint64 `msgpack:"timer,omitempty" json:"timer,omitempty"`
	// Included is set, for a function waiting for inclusion, once its
	// dispatch was included: the function can no longer fail, and what is
	// left is its success hook and moving on (see processor/inclusion.go).
	Included bool `msgpack:"included,omitempty" json:"included,omitempty"`
}

// Waiting says why no worker attempts a batch's next call, and since when.
type Waiting struct {
	// Reason names what is missing, e.g. "no worker serves `greet`".
	Reason string    `msgpack:"reason" json:"reason"`
	Since  time.Time `msgpack:"since" json:"since"`
	// Type is the function type asked for (empty for an atomic unit).
	Type string `msgpack:"type,omitempty" json:"type,omitempty"`
}

// DueFallback is a function given up on whose fallback no worker has
// attempted yet.
type DueFallback struct {
	// Index is the function (for an atomic batch, the one that failed).
	Index int `msgpack:"index" json:"index"`
	// Exhausted is true when its retries ran out, false when its error was
	// not retryable.
	Exhausted bool `msgpack:"exhausted" json:"exhausted"`
	// Reason is the failure that ends the batch if the fallback does not
	// handle it.
	Reason string `msgpack:"reason" json:"reason"`
}

// Progress is the execution state of one batch, key "<domain>.<id>" of the
// progress bucket. It is written before a token is acknowledged, so a crash
// between any two steps repeats nothing.
type Progress struct {
	V       uint8  `msgpack:"v" json:"v"`
	BatchID uint64 `msgpack:"id" json:"id"`
	Gen     uint32 `msgpack:"gen" json:"gen"`
	// Rotation counts the batch's rotations; a token carries it too.
	Rotation uint32 `msgpack:"step" json:"step"`
	State    State  `msgpack:"state" json:"state"`
	// Next is the index of the next function to run (non-atomic).
	Next int `msgpack:"next" json:"next"`
	// Failures counts failed attempts per function (atomic: index 0 counts the unit).
	Failures []int `msgpack:"failures,omitempty" json:"failures,omitempty"`
	// Rounds counts per function the failures that invalidated an effect
	// that took place (a failed confirmation); see WorkRequest.Round.
	Rounds []int `msgpack:"rounds,omitempty" json:"rounds,omitempty"`
	// LastError is the last failure's message.
	LastError string `msgpack:"last_error,omitempty" json:"last_error,omitempty"`
	// Parked is set while State is Parked.
	Parked *ParkedFunction `msgpack:"parked,omitempty" json:"parked,omitempty"`
	// NotBefore delays the next step: a token fetched earlier is put back
	// until then (a retry after a failed confirmation).
	NotBefore time.Time `msgpack:"not_before,omitempty" json:"not_before,omitzero"`
	// FailedIndex is the function whose failure ended the batch (Done only).
	FailedIndex int `msgpack:"failed_index,omitempty" json:"failed_index,omitempty"`
	// Fallbacks lists the functions a fallback handled.
	Fallbacks []int `msgpack:"fallbacks,omitempty" json:"fallbacks,omitempty"`
	// FallbackDue is set while a function given up on waits for a worker
	// to attempt its fallback: the next step asks for the fallback again
	// instead of running the function.
	FallbackDue *DueFallback `msgpack:"fallback_due,omitempty" json:"fallback_due,omitempty"`
	// Waiting is set while the next step waits for a worker to attempt its
	// call (none serves the function type, or none answered for long): why,
	// and since when. The processor writes it once per reason and clears it
	// with the batch's next progress write.
	Waiting *Waiting `msgpack:"waiting,omitempty" json:"waiting,omitempty"`
	// Outputs are the results of the functions that took effect.
	Outputs []pipeline.Output `msgpack:"outputs,omitempty" json:"outputs,omitempty"`
	// Outcome is set once State is Done.
	Outcome   *pipeline.Outcome `msgpack:"outcome,omitempty" json:"outcome,omitempty"`
	UpdatedAt time.Time         `msgpack:"updated_at" json:"updated_at"`
	// By names the processor replica (or "authz") that wrote this record
	// last, at UpdatedAt: who moved the batch last, and since when.
	By string `msgpack:"by,omitempty" json:"by,omitempty"`
}

// FailuresOf returns the failure count of function i.
func (p *Progress) FailuresOf(i int) int {
	if i < 0 || i >= len(p.Failures) {
		return 0
	}
	return p.Failures[i]
}

// AddFailure counts one more failure of function i and returns the new count.
func (p *Progress) AddFailure(i int) int {
	for len(p.Failures) <= i {
		p.Failures = append(p.Failures, 0)
	}
	p.Failures[i]++
	return p.Failures[i]
}

// RoundOf returns function i's round.
func (p *Progress) RoundOf(i int) int {
	if i < 0 || i >= len(p.Rounds) {
		return 0
	}
	return p.Rounds[i]
}

// NewRound starts a new round of function i.
func (p *Progress) NewRound(i int) {
	for len(p.Rounds) <= i {
		p.Rounds = append(p.Rounds, 0)
	}
	p.Rounds[i]++
}

// Attempts counts the executions recorded so far: every failed attempt,
// plus one per function that took effect (an atomic unit counts once).
func (p *Progress) Attempts(atomic bool) int {
	n := p.Next
	if atomic && n > 0 {
		n = 1
	}
	for _, f := range p.Failures {
		n += f
	}
	return n
}

// Event is one line of a batch record's history.
type Event struct {
	At     time.Time `msgpack:"at" json:"at"`
	What   string    `msgpack:"what" json:"what"`
	Detail string    `msgpack:"detail,omitempty" json:"detail,omitempty"`
}

// EventCallback is the What of the event authz adds to a batch record as
// it applies the batch's terminal callback: once, since a callback finds
// a terminal record and changes nothing.
const EventCallback = "callback"

// BatchRecord is authz's record of a batch, key "<id>" of the batches bucket.
type BatchRecord struct {
	V       uint8             `msgpack:"v" json:"v"`
	Batch   pipeline.Batch    `msgpack:"batch" json:"batch"`
	Status  pipeline.Status   `msgpack:"status" json:"status"`
	Outcome *pipeline.Outcome `msgpack:"outcome,omitempty" json:"outcome,omitempty"`
	// IdempotencyKey is the caller's key for duplicate submissions.
	IdempotencyKey string `msgpack:"idem,omitempty" json:"idempotency_key,omitempty"`
	// Attempts is the attempt count the terminal callback reported.
	Attempts int `msgpack:"attempts" json:"attempts"`
	// Fallback is true when a fallback handled a failed function.
	Fallback bool `msgpack:"fallback,omitempty" json:"fallback,omitempty"`
	// DeadLetter is the DLQ sequence of the batch's dead letter, if any.
	DeadLetter uint64 `msgpack:"dead_letter,omitempty" json:"dead_letter,omitempty"`
	// ReplayedAs is the id of the batch this one's dead letter was replayed as.
	ReplayedAs uint64 `msgpack:"replayed_as,omitempty" json:"replayed_as,omitempty"`
	// Outputs are the results of the functions that took effect, as the
	// terminal callback carried them: set once the batch finished. An
	// output whose data did not fit beside the rest of the record keeps
	// its index and type only (Trimmed).
	Outputs   []pipeline.Output `msgpack:"outputs,omitempty" json:"outputs,omitempty"`
	CreatedAt time.Time         `msgpack:"created_at" json:"created_at"`
	UpdatedAt time.Time         `msgpack:"updated_at" json:"updated_at"`
	// FinishedAt is when the batch finished (its callback's time), set
	// with its terminal status: its records expire Retention's age after.
	FinishedAt time.Time `msgpack:"finished_at,omitempty" json:"finished_at,omitzero"`
	History    []Event   `msgpack:"history,omitempty" json:"history,omitempty"`
}

// Callback is what a processor tells authz about a batch's terminal outcome.
type Callback struct {
	V         uint8             `msgpack:"v" json:"v"`
	BatchID   uint64            `msgpack:"id" json:"id"`
	Domain    string            `msgpack:"domain" json:"domain"`
	Priority  pipeline.Priority `msgpack:"priority" json:"priority"`
	Outcome   pipeline.Outcome  `msgpack:"outcome" json:"outcome"`
	Attempts  int               `msgpack:"attempts" json:"attempts"`
	At        time.Time         `msgpack:"at" json:"at"`
	Processor string            `msgpack:"processor,omitempty" json:"processor,omitempty"`
	// Fallback is true when a fallback handled a function that failed.
	Fallback bool `msgpack:"fallback,omitempty" json:"fallback,omitempty"`
	// DeadLetter is the DLQ sequence of the batch's dead letter, if any.
	DeadLetter uint64 `msgpack:"dead_letter,omitempty" json:"dead_letter,omitempty"`
	// Outputs are the results of the functions that took effect, in
	// order: what authz keeps in the batch record for the submitter.
	Outputs []pipeline.Output `msgpack:"outputs,omitempty" json:"outputs,omitempty"`
	// Trace is the W3C trace context of the step that finished the batch,
	// for a callback that may travel in a group (whose message's headers
	// are the group's, not its members'); a callback alone carries it in
	// its headers.
	Trace map[string]string `msgpack:"trace,omitempty" json:"trace,omitempty"`
}

// Origin says where a dead letter came from.
type Origin struct {
	Stream  string `msgpack:"stream" json:"stream"`
	Subject string `msgpack:"subject" json:"subject"`
	Seq     uint64 `msgpack:"seq" json:"seq"`
}

// DeadLetter is a batch that failed permanently, with everything needed to
// inspect and replay it.
type DeadLetter struct {
	V      uint8          `msgpack:"v" json:"v"`
	Batch  pipeline.Batch `msgpack:"batch" json:"batch"`
	Domain string         `msgpack:"domain" json:"domain"`
	// Index is the function that failed; -1 for an atomic unit.
	Index    int               `msgpack:"index" json:"index"`
	Error    string            `msgpack:"error" json:"error"`
	Attempts int               `msgpack:"attempts" json:"attempts"`
	Outcome  pipeline.Outcome  `msgpack:"outcome" json:"outcome"`
	Outputs  []pipeline.Output `msgpack:"outputs,omitempty" json:"outputs,omitempty"`
	Origin   Origin            `msgpack:"origin" json:"origin"`
	At       time.Time         `msgpack:"at" json:"at"`
	// Callback is the bytes of a callback authz dead-lettered (one it
	// could not apply): CALLBACKS removes a callback once acknowledged,
	// so replay decodes these instead.
	Callback []byte `msgpack:"callback,omitempty" json:"callback,omitempty"`
}

// Confirmation is the body of a message on a confirm subject.
type Confirmation struct {
	V       uint8  `msgpack:"v" json:"v"`
	Content string `msgpack:"content" json:"content"`
	// By is the identity that confirmed, as authz learnt it from the subject
	// authz.<user>.confirm. Processors trust it because nats.conf lets only
	// authz (and admin, which provisions) publish confirm.>: no caller can
	// put a confirmation on the stream with a body naming someone else.
	// Empty only on a confirmation admin published by hand.
	By string `msgpack:"by,omitempty" json:"by,omitempty"`
	// Ref names the dispatch a confirmation of a function waiting for
	// inclusion is about (the Result.Ref its handler returned, one per
	// round): it is applied only while that dispatch is the one parked.
	// Other confirmations ignore it.
	Ref string `msgpack:"ref,omitempty" json:"ref,omitempty"`
}

// WorkCall is one function in a work request.
type WorkCall struct {
	Index   int              `msgpack:"index"`
	Type    string           `msgpack:"type"`
	Payload pipeline.Payload `msgpack:"payload,omitempty"`
}

// WorkRequest asks a worker to run one function, or an atomic unit.
type WorkRequest struct {
	V         uint8     `msgpack:"v"`
	BatchID   uint64    `msgpack:"id"`
	Domain    string    `msgpack:"domain"`
	Key       string    `msgpack:"key,omitempty"`
	CreatedAt time.Time `msgpack:"created_at"`
	// Submitter and Label are the batch's, as authz recorded them: the
	// handler's pipeline.Call carries them so it can authorize the call.
	Submitter string `msgpack:"submitter,omitempty"`
	Label     string `msgpack:"label,omitempty"`
	Attempt   int    `msgpack:"attempt"`
	// Round counts the function's failures that invalidated an effect that
	// took place (a failed confirmation): a new round runs the handler
	// again, a repeated call of the same round is answered from the record,
	// including a call that timed out but completed.
	Round int `msgpack:"round"`
	// Unit is true for an atomic unit: Calls run in order, all or nothing.
	Unit  bool       `msgpack:"unit,omitempty"`
	Calls []WorkCall `msgpack:"calls"`
	// Inputs are the outputs of earlier functions of the batch.
	Inputs []pipeline.Output `msgpack:"inputs,omitempty"`
	// Retry classifies the error as retryable or not, where the error chain is.
	Retry *pipeline.RetryLogic `msgpack:"retry,omitempty"`
	// Failure is set on fallback requests.
	Failure *pipeline.Failure `msgpack:"failure,omitempty"`
	// Sender names the sender the batch holds, for functions that need one.
	Sender string `msgpack:"sender,omitempty"`
	// Inclusion is set on poll and hook requests of a function waiting for
	// inclusion.
	Inclusion *InclusionCall `msgpack:"inclusion,omitempty"`
	// Trace is the W3C trace context of the step that asked for this
	// call, for a request that travels with others (WorkBatch), whose
	// message headers cannot carry each one's; empty when not traced.
	Trace map[string]string `msgpack:"trace,omitempty"`
}

// WorkError is a handler failure as it crosses the wire.
type WorkError struct {
	Message   string   `msgpack:"message"`
	Codes     []string `msgpack:"codes,omitempty"`
	Permanent bool     `msgpack:"permanent,omitempty"`
	Retryable bool     `msgpack:"retryable"`
	// Index is the function that failed.
	Index int `msgpack:"index"`
	// NoFallback is set on a fallback request for a type without a fallback.
	NoFallback bool `msgpack:"no_fallback,omitempty"`
	// NoHook is set on a poll or hook request for a type whose handler
	// does not implement it.
	NoHook bool `msgpack:"no_hook,omitempty"`
	// Busy says the call was not attempted (another worker is running it,
	// or its record could not be read): retry later, counting no attempt.
	Busy bool `msgpack:"busy,omitempty"`
}

// Completion is a worker's record of a function (or atomic unit) under
// its key in the results bucket: a claim while it runs, then its outputs.
type Completion struct {
	V uint8 `msgpack:"v"`
	// Running marks a claim: a worker is running the call, or writing its
	// completion record, until Until. Until covers the caller's deadline
	// plus the time the worker keeps trying to write the record (across a
	// server restart), so no other worker takes over a call whose record is
	// still on its way.
	Running bool      `msgpack:"running,omitempty"`
	Until   time.Time `msgpack:"until,omitempty"`
	Worker  string    `msgpack:"worker,omitempty"`
	// Outputs are the call's results once it completed.
	Outputs []pipeline.Output `msgpack:"outputs,omitempty"`
}

// UnitGroup is the value of a group key of the results bucket
// (streams.UnitGroupKey): the claims and completion records of the atomic units
// of streams.UnitGroupSize consecutive batch ids, one entry per unit key
// (streams.ResultKey with index -1). The bucket keeps one revision per key, so the
// value is the group's whole state, and every write of it is a
// compare-and-set on the revision read.
type UnitGroup struct {
	V     uint8       `msgpack:"v"`
	Units []UnitEntry `msgpack:"units,omitempty"`
}

// UnitEntry is one atomic unit's state in its UnitGroup: a claim while a
// worker runs it, then its completion record, or the mark of a run that
// failed. An entry counts until Until; past it, it is ignored and dropped
// by the group's next write.
type UnitEntry struct {
	// Key is the unit's completion key, streams.ResultKey(id, -1, round).
	Key string `msgpack:"key"`
	// Running marks a claim: Worker runs the unit, or writes its record,
	// until Until (the caller's deadline plus a grace period and the
	// record window), for the request whose claim nonce is Claim.
	Running bool `msgpack:"running,omitempty"`
	// Released marks a unit whose run failed (or was not attempted): no
	// record, so the next call runs it, but not under a fresh key.
	Released bool `msgpack:"released,omitempty"`
	// Own marks a record kept under the unit's own key (a Completion at
	// Key), its outputs too large to share the group's value.
	Own bool `msgpack:"own,omitempty"`
	// Claim is the nonce of the request that claimed the unit, kept in its
	// record so that a write whose answer was lost knows its own.
	Claim  uint64    `msgpack:"claim,omitempty"`
	Until  time.Time `msgpack:"until,omitempty"`
	Worker string    `msgpack:"worker,omitempty"`
	// Outputs are the unit's results once it completed (unless Own).
	Outputs []pipeline.Output `msgpack:"outputs,omitempty"`
}

// Recorded says the entry is a completion record: neither a claim nor a
// released run.
func (e *UnitEntry) Recorded() bool { return !e.Running && !e.Released }

// Live says the entry still counts at now.
func (e *UnitEntry) Live(now time.Time) bool { return e.Until.IsZero() || now.Before(e.Until) }

// Error returns the message.
func (e *WorkError) Error() string { return e.Message }

// WorkReply is a worker's answer.
type WorkReply struct {
	V uint8 `msgpack:"v"`
	// Outputs holds one output per call on success.
	Outputs []pipeline.Output `msgpack:"outputs,omitempty"`
	Error   *WorkError        `msgpack:"error,omitempty"`
	// Recorded is true when the answer came from the completion record
	// rather than from running the handler.
	Recorded bool `msgpack:"recorded,omitempty"`
	// Fresh is true when the handler ran in this call under a completion
	// key no earlier call had ever claimed, and its completion record is
	// written: no other run of the call happened before it or can follow.
	// A processor that saw no progress record may then skip writing one.
	Fresh bool `msgpack:"fresh,omitempty"`
	// Included answers a poll: the dispatched effect was included.
	Included bool `msgpack:"included,omitempty"`
}

// Bounds of a SubmittedEntry.
const (
	// SubmittedGroup is the most batch ids one SubmittedEntry holds.
	SubmittedGroup = 64
	// SubmittedBack is how many earlier entries of its subject a
	// SubmittedEntry names, so that a reader going back reads that many
	// at once.
	SubmittedBack = 16
)

// SubmittedEntry is a message of streams.StreamSubmitted: batches of one
// submitter, accepted by one authz replica one after another, oldest
// first, and the stream sequences of the entries of the same subject
// before it, newest first (at most SubmittedBack; none for the first).
type SubmittedEntry struct {
	V    uint8    `msgpack:"v"`
	IDs  []uint64 `msgpack:"ids"`
	Back []uint64 `msgpack:"back,omitempty"`
}

// Encode msgpack-encodes a wire record, stamping it with WireVersion.
// Records with a hand-written codec (see codec.go) skip msgpack's
// reflection.
func Encode[T any, P interface {
	*T
	versioned
}](v P) ([]byte, error) {
	v.setVersion()
	if a, ok := any(v).(wire.Appender); ok {
		return wire.Marshal(a), nil
	}
	b, err := msgpack.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("records: encode %T: %w", v, err)
	}
	return b, nil
}

// EncodeWith calls use with the wire encoding of a record with a
// hand-written codec, as Encode encodes it, in a pooled buffer that use
// must not keep (wire.WithEncoding): for a hot path whose bytes are
// copied away (a publish copies them).
func EncodeWith[T any, P interface {
	*T
	versioned
	wire.Appender
}](v P, use func([]byte)) {
	v.setVersion()
	wire.WithEncoding(v, use)
}

// Decode reads a wire record, rejecting malformed bytes with ErrDecode and
// records of another version with ErrVersion. It never panics. Records
// with a hand-written codec (see codec.go) skip msgpack's reflection; the
// others are read by a pooled decoder.
func Decode[T any, P interface {
	*T
	versioned
}](b []byte) (out T, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w %T: %v", ErrDecode, out, r)
		}
	}()
	if r, ok := any(P(&out)).(wire.Reader); ok {
		if _, err := r.ReadMsgpack(b); err != nil {
			return out, fmt.Errorf("%w %T: %w", ErrDecode, out, err)
		}
	} else if err := decodeReflect(b, P(&out)); err != nil {
		return out, fmt.Errorf("%w %T: %w", ErrDecode, out, err)
	}
	if v := P(&out).version(); v != WireVersion {
		return out, fmt.Errorf("%w: %T version %d, this build reads %d", ErrVersion, out, v, WireVersion)
	}
	return out, nil
}

type versioned interface {
	version() uint8
	setVersion()
}

func (t *Token) version() uint8          { return t.V }
func (t *Token) setVersion()             { t.V = WireVersion }
func (p *Progress) version() uint8       { return p.V }
func (p *Progress) setVersion()          { p.V = WireVersion }
func (r *BatchRecord) version() uint8    { return r.V }
func (r *BatchRecord) setVersion()       { r.V = WireVersion }
func (c *Callback) version() uint8       { return c.V }
func (c *Callback) setVersion()          { c.V = WireVersion }
func (d *DeadLetter) version() uint8     { return d.V }
func (d *DeadLetter) setVersion()        { d.V = WireVersion }
func (c *Confirmation) version() uint8   { return c.V }
func (c *Confirmation) setVersion()      { c.V = WireVersion }
func (w *WorkRequest) version() uint8    { return w.V }
func (w *WorkRequest) setVersion()       { w.V = WireVersion }
func (c *Completion) version() uint8     { return c.V }
func (c *Completion) setVersion()        { c.V = WireVersion }
func (g *UnitGroup) version() uint8      { return g.V }
func (g *UnitGroup) setVersion()         { g.V = WireVersion }
func (w *WorkReply) version() uint8      { return w.V }
func (w *WorkReply) setVersion()         { w.V = WireVersion }
func (e *SubmittedEntry) version() uint8 { return e.V }
func (e *SubmittedEntry) setVersion()    { e.V = WireVersion }

// DomainState is the value of a domain's key in the processors bucket:
// paused or active, and who changed it. It is JSON, so `nats kv get
// processors <domain>` is legible.
type DomainState struct {
	Paused bool      `json:"paused"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at"`
}

// DecodeDomainState reads a processors bucket value.
func DecodeDomainState(b []byte) (DomainState, error) {
	var st DomainState
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w domain state %q: %w", ErrDecode, b, err)
	}
	return st, nil
}
