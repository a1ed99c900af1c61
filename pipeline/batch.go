package pipeline

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Priority selects the queue a batch waits in. High is always served before Med.
type Priority string

// The two priorities.
const (
	High Priority = "high"
	Med  Priority = "med"
)

// Validate rejects anything but High and Med.
func (p Priority) Validate() error {
	if p != High && p != Med {
		return invalid("priority", "must be %q or %q (got %q)", High, Med, string(p))
	}
	return nil
}

// Mode says whether a batch runs as one unit or function by function.
type Mode string

// The two subroutine modes.
const (
	// Atomic batches run all functions as one unit: all take effect or none.
	Atomic Mode = "atomic"
	// NonAtomic batches run one function per tick, each with its own retries.
	NonAtomic Mode = "non_atomic"
)

// Subroutine is how the authorization table says a batch must be executed.
type Subroutine struct {
	Mode Mode `msgpack:"mode" json:"mode"`
	// Retry is the batch-level retry logic of an atomic batch; nil means one
	// attempt. Non-atomic batches use each function's own Retry.
	Retry *RetryLogic `msgpack:"retry,omitempty" json:"retry,omitempty"`
}

// Confirmation makes a non-atomic function wait, after it executed, for a
// confirmation from outside (a callback confirmation, such as a
// transaction's inclusion in a block).
type Confirmation struct {
	// Expect is the exact content the confirmation must carry.
	Expect string `msgpack:"expect" json:"expect"`
	// Timeout is how long to wait; no confirmation by then is a failure of the
	// function, and its retry logic applies.
	Timeout Duration `msgpack:"timeout" json:"timeout"`
	// By lists the identities allowed to confirm (through authz, which
	// records the caller as the confirmer); empty means any caller.
	By []string `msgpack:"by,omitempty" json:"by,omitempty"`
}

// Function is one call in a batch.
type Function struct {
	// Type selects the handler, e.g. "ledger.transfer".
	Type string `msgpack:"type" json:"type"`
	// Payload is the handler's argument, msgpack-encoded.
	Payload Payload `msgpack:"payload,omitempty" json:"payload,omitempty"`
	// Retry is this function's retry logic in a non-atomic batch; nil means one attempt.
	Retry *RetryLogic `msgpack:"retry,omitempty" json:"retry,omitempty"`
	// Confirm, when set, parks the batch after this function until confirmed.
	Confirm *Confirmation `msgpack:"confirm,omitempty" json:"confirm,omitempty"`
	// Sender, when true, makes the batch hold a sender of its domain's pool
	// while it runs; the handler gets its name in Call.Sender.
	Sender bool `msgpack:"sender,omitempty" json:"sender,omitempty"`
	// Inclusion, when set, parks the batch after this function until what
	// it dispatched is included.
	Inclusion *Inclusion `msgpack:"inclusion,omitempty" json:"inclusion,omitempty"`
}

// Batch is what callers submit: functions to run in order under one id.
type Batch struct {
	// ID is global and monotonic, assigned by authz.
	ID uint64 `msgpack:"id" json:"id"`
	// Domain names the processor that executes the batch.
	Domain string `msgpack:"domain" json:"domain"`
	// Label is the authorization label the batch was submitted under.
	Label string `msgpack:"label,omitempty" json:"label,omitempty"`
	// Submitter is the identity that submitted the batch, as authz learnt it.
	Submitter string `msgpack:"submitter,omitempty" json:"submitter,omitempty"`
	// Functions run in order; at least one.
	Functions []Function `msgpack:"functions" json:"functions"`
	// Subroutine says atomic or not and the batch-level retry logic.
	Subroutine Subroutine `msgpack:"subroutine" json:"subroutine"`
	// Priority selects the queue.
	Priority Priority `msgpack:"priority" json:"priority"`
	// Key is an optional serialisation key, given to handlers as Call.Key:
	// batches of a domain with the same key run one at a time, in the order
	// authz accepted them (authz keeps each key's order).
	Key string `msgpack:"key,omitempty" json:"key,omitempty"`
	// ExpiresAt, when set, is the time after which the batch is not executed.
	ExpiresAt time.Time `msgpack:"expires_at,omitempty" json:"expires_at,omitzero"`
	// CreatedAt is when authz accepted the batch.
	CreatedAt time.Time `msgpack:"created_at" json:"created_at"`
	// ReplayOf links a replayed dead letter to the batch it came from.
	ReplayOf uint64 `msgpack:"replay_of,omitempty" json:"replay_of,omitempty"`
	// RunAt, when set, is when a scheduled batch becomes executable: its
	// first step runs no earlier. Zero: at once.
	RunAt time.Time `msgpack:"run_at,omitempty" json:"run_at,omitzero"`
}

// MaxFunctions bounds the functions of one batch.
const MaxFunctions = 1000

// Validate reports the first rule the batch breaks, as a *ValidationError
// naming the field, e.g. "functions[1].retry.backoff.multiplier".
func (b *Batch) Validate() error {
	if err := ValidateDomain(b.Domain); err != nil {
		return err
	}
	if err := b.Priority.Validate(); err != nil {
		return err
	}
	switch b.Subroutine.Mode {
	case Atomic, NonAtomic:
	default:
		return invalid("subroutine.mode", "must be %q or %q (got %q)", Atomic, NonAtomic, string(b.Subroutine.Mode))
	}
	if b.Subroutine.Retry != nil {
		if b.Subroutine.Mode != Atomic {
			return invalid("subroutine.retry", "applies to atomic batches only; give non-atomic functions their own retry")
		}
		if err := b.Subroutine.Retry.Validate(); err != nil {
			return prefix("subroutine.retry", err)
		}
	}
	if len(b.Functions) == 0 {
		return invalid("functions", "must hold at least one function")
	}
	if len(b.Functions) > MaxFunctions {
		return invalid("functions", "must hold at most %d functions (got %d)", MaxFunctions, len(b.Functions))
	}
	for i := range b.Functions {
		if err := b.Functions[i].validate(b.Subroutine.Mode); err != nil {
			return prefix(fmt.Sprintf("functions[%d]", i), err)
		}
	}
	if b.Key != "" {
		if err := validateToken("key", b.Key); err != nil {
			return err
		}
	}
	return nil
}

func (f *Function) validate(mode Mode) error {
	if err := ValidateType(f.Type); err != nil {
		return err
	}
	if f.Retry != nil {
		if mode == Atomic {
			return invalid("retry", "not allowed in an atomic batch; set subroutine.retry instead")
		}
		if err := f.Retry.Validate(); err != nil {
			return prefix("retry", err)
		}
	}
	if f.Confirm != nil {
		if mode == Atomic {
			return invalid("confirm", "not allowed in an atomic batch; confirmations wait between functions")
		}
		if f.Confirm.Timeout <= 0 {
			return invalid("confirm.timeout", "must be a positive duration (got %s)", f.Confirm.Timeout)
		}
	}
	if f.Inclusion != nil {
		switch {
		case mode == Atomic:
			return invalid("inclusion", "not allowed in an atomic batch; inclusion waits between functions")
		case f.Confirm != nil:
			return invalid("inclusion", "not allowed together with confirm; an inclusion is confirmed itself")
		}
		if err := f.Inclusion.validate(); err != nil {
			return prefix("inclusion", err)
		}
	}
	return nil
}

// ValidateDomain rejects a domain name that cannot be one NATS subject token:
// empty, or holding '.', '*', '>', white space or control characters.
func ValidateDomain(domain string) error { return validateToken("domain", domain) }

// ValidateType checks a function type: letters, digits, '-' and '_', in
// dot-separated parts ("ledger.transfer"), at most 128 bytes.
func ValidateType(typ string) error {
	if typ == "" {
		return invalid("type", "must not be empty")
	}
	if len(typ) > 128 {
		return invalid("type", "must be at most 128 bytes (got %d)", len(typ))
	}
	// One pass over the bytes, without splitting: every type of every
	// call of every send is checked here, on both sides of the API.
	partLen := 0
	for i := 0; i < len(typ); i++ {
		switch c := typ[i]; {
		case c == '.':
			if partLen == 0 {
				return invalid("type", "%q must not have empty dot-separated parts", typ)
			}
			partLen = 0
		case c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			partLen++
		default:
			r, _ := utf8.DecodeRuneInString(typ[i:])
			return invalid("type", "%q may hold only letters, digits, '-', '_' and dots (found %q)", typ, r)
		}
	}
	if partLen == 0 {
		return invalid("type", "%q must not have empty dot-separated parts", typ)
	}
	return nil
}

// validateToken checks that s can stand as one token of a NATS subject.
func validateToken(field, s string) error {
	if s == "" {
		return invalid(field, "must not be empty")
	}
	if len(s) > 128 {
		return invalid(field, "must be at most 128 bytes (got %d)", len(s))
	}
	if i := strings.IndexFunc(s, func(r rune) bool {
		return r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar
	}); i >= 0 {
		return invalid(field, "%q must not contain '.', '*', '>', spaces or control characters (found %q at %d)", s, s[i:i+1], i)
	}
	return nil
}

// RetryFor returns the retry logic that governs function i: the batch's for
// an atomic batch, the function's own otherwise, NoRetry when none is set.
func (b *Batch) RetryFor(i int) *RetryLogic {
	var r *RetryLogic
	if b.Subroutine.Mode == Atomic {
		r = b.Subroutine.Retry
	} else if i >= 0 && i < len(b.Functions) {
		r = b.Functions[i].Retry
	}
	if r == nil {
		return &NoRetry
	}
	return r
}

// Expired reports whether the batch has an expiry at or before now.
func (b *Batch) Expired(now time.Time) bool {
	return !b.ExpiresAt.IsZero() && !now.Before(b.ExpiresAt)
}

// Scheduled reports whether the batch waits for its RunAt at now: its
// first step may not run yet.
func (b *Batch) Scheduled(now time.Time) bool {
	return !b.RunAt.IsZero() && now.Before(b.RunAt)
}
