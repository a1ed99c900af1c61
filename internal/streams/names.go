package streams

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// Stream names.
const (
	// StreamHigh and StreamMed are the work-queue streams holding queue tokens.
	StreamHigh = "HIGH"
	StreamMed  = "MED"
	// StreamCallbacks holds every callback a processor sends authz.
	StreamCallbacks = "CALLBACKS"
	// StreamConfirm holds confirmations from outside until a processor takes them.
	StreamConfirm = "CONFIRM"
	// StreamDLQ holds dead letters.
	StreamDLQ = "DLQ"
	// StreamIDs is the log whose sequence numbers are the global batch ids.
	StreamIDs = "BATCH_IDS"
	// StreamSubmitted is the submitter index: one subject per submitter
	// (SubmittedSubject), whose messages list that submitter's batches in
	// the order they were accepted.
	StreamSubmitted = "SUBMITTED"
	// StreamScheduled holds the schedules of batches sent to run later
	// (ScheduleSubject), and, once the server fires one, its first token
	// until authz forwards it to its queue (DueSubject).
	StreamScheduled = "SCHEDULED"
)

// KV bucket names.
const (
	// BucketBatches holds authz's record of every batch, key "<id>".
	BucketBatches = "batches"
	// BucketProgress holds execution state, key "<domain>.<id>".
	BucketProgress = "progress"
	// BucketDomainStates holds each domain's paused/active state, key
	// "<domain>" (the bucket's name, "processors", is its wire name).
	BucketDomainStates = "processors"
	// BucketLocks holds per-key and per-sender leases, key "<domain>.<key>".
	BucketLocks = "locks"
	// BucketResults holds the workers' completion records, key "<id>.<index>".
	BucketResults = "results"
	// BucketRuns holds step-pipeline run records and step outputs.
	BucketRuns = "runs"
	// BucketKeys holds each key's order: the batches waiting per (domain,
	// key), key KeyQueueKey(domain, key).
	BucketKeys = "keys"

	// BucketSenders holds each domain's sender pool and its leases, key
	// "<domain>".
	BucketSenders = "senders"

	// BucketPresence holds a records.Presence record of every running processor
	// replica (ProcessorPresenceKey) and worker (WorkerPresenceKey); a
	// record expires PresenceTTL after its last refresh.
	BucketPresence = "presence"
)

// Consumer names.
const (
	// CallbacksConsumer is authz's durable consumer on CALLBACKS.
	CallbacksConsumer = "authz"
	// ScheduledConsumer is authz's durable consumer on SCHEDULED, filtered
	// to DueSubject.
	ScheduledConsumer = "authz"
	// CallbacksKeeper is a consumer on CALLBACKS that never acknowledges
	// anything, so that the stream keeps every callback (up to
	// CallbackMaxAge) for whoever reads them all at the end of a run: the
	// chaos suite's checker, tests. A deployment has none (KeepCallbacks).
	CallbacksKeeper = "keep"
)

// Micro service names.
const (
	// WorkerService is the micro service name workers register under.
	WorkerService = "worker"
	// AuthzService is the micro service name of authz.
	AuthzService = "authz"
)

// Headers set on queue tokens, callbacks and dead letters, so
// `nats stream view` is legible.
const (
	HeaderBatchID  = "Batch-Id"
	HeaderDomain   = "Domain"
	HeaderKind     = "Kind"
	HeaderPriority = "Priority"
	HeaderStep     = "Step"
	HeaderGen      = "Gen"
	HeaderOutcome  = "Outcome"
	HeaderReason   = "Fail-Reason"
	HeaderOrigin   = "Orig-Subject"
	// HeaderDeadline carries a work request's deadline in Unix nanoseconds.
	HeaderDeadline = "Tickflow-Deadline"
)

// QueueStream returns the stream of priority p.
func QueueStream(p pipeline.Priority) string {
	if p == pipeline.High {
		return StreamHigh
	}
	return StreamMed
}

// ProcessorConsumer is the durable consumer name a domain's processors share,
// on HIGH, MED and CONFIRM alike.
func ProcessorConsumer(domain string) string { return "proc-" + domain }

// TickSubject is the core NATS subject that ticks domain. Anyone may publish it.
func TickSubject(domain string) string { return "tick." + domain }

// TickQueueGroup is the queue group a domain's processors subscribe ticks in,
// so each tick reaches one replica.
func TickQueueGroup(domain string) string { return "proc-" + domain }

// TokenSubject is the subject authz publishes new tokens of domain at
// priority p on. One subject per domain, not per batch: a consumer filtered
// to a wildcard over many subjects finds its next message in time that grows
// with the number of subjects (docs/decisions/tokens-one-subject-per-domain.md).
func TokenSubject(p pipeline.Priority, domain string) string {
	return "batches." + string(p) + "." + domain
}

// RequeueSubject is the subject a domain's processors rotate a batch to the
// back of its queue on.
func RequeueSubject(p pipeline.Priority, domain string) string {
	return "requeue." + string(p) + "." + domain
}

// KeeperSubject is the subject of the keeper of queue p's stream: a
// message no consumer takes, which authz keeps near the stream's newest
// tokens so that the stream's file never empties (see the keeper in authz).
// It is outside the token subjects, so no domain's consumer, listing or
// count sees it.
func KeeperSubject(p pipeline.Priority) string { return "keep." + string(p) }

// IsKeeper tells whether subject is a queue keeper's (KeeperSubject).
func IsKeeper(subject string) bool { return strings.HasPrefix(subject, "keep.") }

// QueueTokensFilter matches every token of queue p's stream, of every
// domain, and not its keeper: a subject filter for counting tokens.
func QueueTokensFilter(p pipeline.Priority) string { return "*." + string(p) + ".*" }

// QueueFilter matches both subjects of a domain's queue at priority p, for
// listing the queue in stream order.
func QueueFilter(p pipeline.Priority, domain string) string {
	return "*." + string(p) + "." + domain
}

// ScheduleSubject is the subject of the schedule of batch id, of domain at
// priority p: one subject per schedule, so the server keeps one schedule
// per batch (a repeated publish replaces it) and a cancel removes it by
// subject.
func ScheduleSubject(p pipeline.Priority, domain string, id uint64) string {
	return "sched.at." + string(p) + "." + domain + "." + strconv.FormatUint(id, 10)
}

// ScheduleFilter matches the schedules of domain at priority p, for
// listing them.
func ScheduleFilter(p pipeline.Priority, domain string) string {
	return "sched.at." + string(p) + "." + domain + ".*"
}

// ScheduleSubjects matches every ScheduleSubject.
const ScheduleSubjects = "sched.at.>"

// DueSubject is the target of every schedule: the server publishes a
// schedule's token there when it fires, and authz forwards it to the
// batch's queue. One literal subject, so authz's consumer finds its next
// message without walking the schedules.
const DueSubject = "sched.due"

// CallbackSubject is where domain's processors publish callbacks.
func CallbackSubject(domain string) string { return "callbacks." + domain }

// CallbackDomain returns the domain of a callback subject, and false for a
// subject that is not one.
func CallbackDomain(subject string) (string, bool) {
	d, ok := strings.CutPrefix(subject, CallbackSubject(""))
	return d, ok && d != "" && !strings.Contains(d, ".")
}

// ConfirmSubject is where the confirmation of function index of batch id goes.
func ConfirmSubject(domain string, id uint64, index int) string {
	return confirmRoot + "." + domain + "." + strconv.FormatUint(id, 10) + "." + strconv.Itoa(index)
}

// confirmRoot is the first token of every confirmation subject.
const confirmRoot = "confirm"

// ParseConfirmSubject splits a ConfirmSubject into its domain, batch id and
// function index; anything else is an error saying what was expected.
func ParseConfirmSubject(subject string) (domain string, id uint64, index int, err error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 || parts[0] != confirmRoot {
		return "", 0, 0, fmt.Errorf("streams: confirmation subject %q: expected confirm.<domain>.<batch id>.<function index>", logging.Capped(subject))
	}
	if id, err = strconv.ParseUint(parts[2], 10, 64); err != nil {
		return "", 0, 0, fmt.Errorf("streams: confirmation subject %q: batch id %q is not a number", logging.Capped(subject), logging.Capped(parts[2]))
	}
	if index, err = strconv.Atoi(parts[3]); err != nil || index < 0 {
		return "", 0, 0, fmt.Errorf("streams: confirmation subject %q: function index %q is not a number ≥ 0", logging.Capped(subject), logging.Capped(parts[3]))
	}
	return parts[1], id, index, nil
}

// ConfirmFilter matches every confirmation of domain.
func ConfirmFilter(domain string) string { return "confirm." + domain + ".>" }

// DLQSubject is where domain's dead letters go.
func DLQSubject(domain string) string { return "dlq." + domain }

// DLQSubjects is the filter covering every domain's dead letters.
const DLQSubjects = "dlq.*"

// IDsSubject is the subject of the batch id log.
const IDsSubject = "ids.batch"

// WorkSubject is the worker endpoint for single functions of type typ.
func WorkSubject(typ string) string { return "work.fn." + typ }

// WorkUnitSubject is the worker endpoint for atomic units.
const WorkUnitSubject = "work.unit"

// WorkUnitsSubject is the worker endpoint for several atomic units in one
// request (records.WorkBatch): one round trip for a wave of steps instead of one
// per unit.
const WorkUnitsSubject = "work.units"

// FallbackSubject is the worker endpoint for the fallback of type typ.
func FallbackSubject(typ string) string { return "work.fallback." + typ }

// Error codes a worker answers a work request with, in the micro
// error-code header, when it cannot even attempt the call.
const (
	// WorkCodeBadRequest: the request does not decode; permanent.
	WorkCodeBadRequest = "400"
	// WorkCodeInternal: the worker cannot encode its reply; permanent.
	WorkCodeInternal = "500"
	// WorkCodeUnavailable: the worker is shutting down; the caller asks
	// again (another worker), counting no attempt.
	WorkCodeUnavailable = CodeStopping
)

// CodeStopping is the error code every service answers a request or tick
// with that arrives once it has begun to stop: nothing ran, ask again.
const CodeStopping = "503"

// WorkQueueGroup is the queue group worker endpoints share.
const WorkQueueGroup = "workers"

// AuthzSubject is the request subject of authz operation op for user: the
// server's permissions let each user publish only under its own name, so
// authz learns the caller from the subject.
func AuthzSubject(user, op string) string { return "authz." + user + "." + op }

// OutcomeSubject is the core NATS subject on which authz announces that
// batch id of submitter user finished, once its record says so: the body
// is the outcome (pipeline.Outcome.String), the record is read with the
// batch operation. nats.conf lets each user subscribe only under its own
// name (OutcomeFilter), so nobody learns of another's batches.
func OutcomeSubject(user string, id uint64) string {
	return "outcomes." + user + "." + strconv.FormatUint(id, 10)
}

// OutcomeFilter matches every OutcomeSubject of user.
func OutcomeFilter(user string) string { return "outcomes." + user + ".>" }

// ParseAuthzSubject splits an AuthzSubject into the caller and the
// operation; ok is false for a subject of another shape.
func ParseAuthzSubject(subject string) (user, op string, ok bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 3 || parts[0] != AuthzService {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// ProgressKey is the progress bucket key of a batch.
func ProgressKey(domain string, id uint64) string {
	return domain + "." + strconv.FormatUint(id, 10)
}

// BatchKey is the batches bucket key of a batch.
func BatchKey(id uint64) string { return strconv.FormatUint(id, 10) }

// ResultKey is the results bucket key of function index of batch id in
// round (the number of times the function failed before; a failed
// confirmation starts a new round); index -1 is an atomic unit as a whole.
func ResultKey(id uint64, index, round int) string {
	fn := "unit"
	if index >= 0 {
		fn = strconv.Itoa(index)
	}
	return strconv.FormatUint(id, 10) + "." + fn + "." + strconv.Itoa(round)
}

// UnitGroupSize is how many consecutive batch ids share one group record
// of atomic units in the results bucket (UnitGroupKey).
const UnitGroupSize = 64

// UnitGroupKey is the results bucket key of the group record (UnitGroup)
// that holds the claims and completion records of the atomic units of
// batch id and its neighbours: the batches whose ids share id /
// UnitGroupSize. Any unit's key (ResultKey with index -1) says where to
// look, and the units of one request, consecutive tokens, share one or two.
func UnitGroupKey(id uint64) string {
	return UnitGroupKeyPrefix + strconv.FormatUint(id/UnitGroupSize, 10)
}

// UnitGroupKeyPrefix starts every UnitGroupKey, and no other key of the
// results bucket (those start with a batch id).
const UnitGroupKeyPrefix = "g."

// LockKey is the locks bucket key serialising key within domain.
func LockKey(domain, key string) string { return domain + "." + key }

// CallbackMsgID is the deduplication id of the terminal callback of a batch:
// the server drops a second terminal callback within the duplicate window,
// and authz applies callbacks idempotently beyond it.
func CallbackMsgID(id uint64) string { return "cb-" + strconv.FormatUint(id, 10) }

// TokenMsgID is the deduplication id of the token of batch id at step and generation.
func TokenMsgID(id uint64, gen, step uint32) string {
	return "tk-" + strconv.FormatUint(id, 10) + "-" + strconv.FormatUint(uint64(gen), 10) + "-" + strconv.FormatUint(uint64(step), 10)
}

// DeadLetterMsgID is the deduplication id of the dead letter of a batch.
func DeadLetterMsgID(id uint64) string { return "dl-" + strconv.FormatUint(id, 10) }

// CallbackDeadLetterMsgID is the deduplication id of the dead letter of the
// callback at sequence seq of CALLBACKS, one authz could not apply.
func CallbackDeadLetterMsgID(seq uint64) string { return "dlcb-" + strconv.FormatUint(seq, 10) }

// CallbackMemberDeadLetterMsgID is the deduplication id of the dead letter
// of batch id's callback, a member of the group at sequence seq of
// CALLBACKS that authz could not apply.
func CallbackMemberDeadLetterMsgID(seq, id uint64) string {
	return "dlcb-" + strconv.FormatUint(seq, 10) + "-" + strconv.FormatUint(id, 10)
}

// ValidateDomain rejects a domain that cannot be one subject token.
func ValidateDomain(domain string) error { return pipeline.ValidateDomain(domain) }

// Keys of the batches bucket besides the batch records ("<id>").

// IdempotencyKey is the batches-bucket key remembering which batch user's
// idempotency key named: a hash, so a caller's key of any length and
// alphabet makes one valid KV key.
func IdempotencyKey(user, key string) string {
	h := sha256.Sum256([]byte(user + "\x00" + key))
	return "idem." + hex.EncodeToString(h[:16])
}

// SubmittedSubjects matches every subject of StreamSubmitted.
const SubmittedSubjects = "submitted.*"

// SubmittedSubject is user's subject of StreamSubmitted: each message is
// a SubmittedEntry naming batches of theirs, appended after the one before
// (compare-and-set on the subject's last sequence), so the subject's order
// is the order the batches were accepted in.
func SubmittedSubject(user string) string { return "submitted." + user }

// SubmitterWindow is how many consecutive batch ids one submitter index
// key stands for: SubmitterKey(user, id) is the same key for every id of
// a window [w, w+SubmitterWindow−1], w a multiple of SubmitterWindow. It
// divides the id blocks of the id log, so a window lies inside one block.
const SubmitterWindow = 16

// SubmitterWindowOf is the first id of batch id's window.
func SubmitterWindowOf(id uint64) uint64 { return id - id%SubmitterWindow }

// SubmitterKey is the batches-bucket key that indexed batch id under its
// submitter before StreamSubmitted did (still read, never written): one
// key per submitter and window of SubmitterWindow ids that
// holds at least one of the submitter's batches, so a submitter's batches
// are listed by one subject-filtered read (SubmitterFilter) and the
// records of the windows found, instead of a scan of every record.
func SubmitterKey(user string, id uint64) string {
	return "by." + user + "." + strconv.FormatUint(SubmitterWindowOf(id), 10)
}

// SubmitterFilter matches every SubmitterKey of user.
func SubmitterFilter(user string) string { return "by." + user + ".*" }

// ParseSubmitterKey returns the first id of the window a SubmitterKey
// stands for; ok is false for a key of another shape. A key written as
// one per batch (by earlier versions, under the batch's own id) gives the
// window of that id, which holds the batch.
func ParseSubmitterKey(key string) (window uint64, ok bool) {
	i := strings.LastIndexByte(key, '.')
	if !strings.HasPrefix(key, "by.") || i < 0 {
		return 0, false
	}
	id, err := strconv.ParseUint(key[i+1:], 10, 64)
	return SubmitterWindowOf(id), err == nil
}

// ReplayKey is the batches-bucket key recording the batch the dead letter
// at DLQ sequence seq was replayed as.
func ReplayKey(seq uint64) string { return "replay." + strconv.FormatUint(seq, 10) }

// Keys of the locks bucket.

// EditKey is the locks-bucket key of a queue edit (evict, insert) in
// progress on a domain's queue of priority p.
func EditKey(domain string, p pipeline.Priority) string { return "edit." + domain + "." + string(p) }

// KeyQueueKey is the keys-bucket key of key's order within domain: the key
// itself when it is made of letters, digits, '-' and '_', otherwise '='
// and its unpadded URL-safe base64 (a KV key allows fewer characters than a
// batch key may hold; '=' never starts a key kept as it is).
func KeyQueueKey(domain, key string) string {
	for _, r := range key {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return domain + ".=" + base64.RawURLEncoding.EncodeToString([]byte(key))
		}
	}
	return domain + "." + key
}

// KeyQueueFilter matches the keys-bucket keys of every key of domain.
func KeyQueueFilter(domain string) string { return domain + ".*" }

// SlotKey is the locks-bucket key holding the concurrency slots of label.
func SlotKey(label string) string { return "label." + label }

// SubmitterSlotKey is the locks-bucket key holding the unfinished batches
// submitter has under label, when the label bounds them.
func SubmitterSlotKey(label, submitter string) string {
	return "unfinished." + label + "." + submitter
}

// FallbackResultKey is the results-bucket key of the fallback of function
// index of batch id, in round.
func FallbackResultKey(id uint64, index, round int) string {
	return ResultKey(id, index, round) + ".fallback"
}

// PollSubject is the worker endpoint polling the inclusion of type typ.
func PollSubject(typ string) string { return "work.poll." + typ }

// HookSubject is the worker endpoint calling the success and failure hooks
// of type typ.
func HookSubject(typ string) string { return "work.hook." + typ }

// HookResultKey is the results-bucket key recording that hook ran for
// function index of batch id: once per function, whatever its rounds.
func HookResultKey(id uint64, index int, hook string) string {
	return strconv.FormatUint(id, 10) + "." + strconv.Itoa(index) + ".hook-" + hook
}
