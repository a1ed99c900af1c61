package pipeline

import "context"

// Inclusion makes a non-atomic function's success mean "dispatched, now
// wait for inclusion": the batch parks after the handler returned, until an
// outside confirmation or the handler's Poller says the dispatched effect
// (a transaction) was included or failed. Not included within MaxWait is a
// failure of the function, retried under its retry logic with the next
// Attempt, so the handler can dispatch again differently (a higher fee).
type Inclusion struct {
	// PollEvery is how often the worker's Poller is asked; 0 polls never
	// and waits for an outside confirmation alone.
	PollEvery Duration `msgpack:"poll_every,omitempty" json:"poll_every,omitempty" yaml:"poll_every,omitempty"`
	// MaxWait bounds the wait for inclusion after each dispatch.
	MaxWait Duration `msgpack:"max_wait" json:"max_wait" yaml:"max_wait"`
	// By lists the identities allowed to confirm the inclusion through
	// authz; empty means any caller that may confirm.
	By []string `msgpack:"by,omitempty" json:"by,omitempty" yaml:"by,omitempty"`
}

func (i *Inclusion) validate() error {
	if i.MaxWait <= 0 {
		return invalid("max_wait", "must be a positive duration (got %s)", i.MaxWait)
	}
	if i.PollEvery < 0 {
		return invalid("poll_every", "must not be negative (got %s)", i.PollEvery)
	}
	return nil
}

// Inclusion confirmation contents: an outside confirmation of a function
// waiting for inclusion carries ConfirmIncluded, or ConfirmFailed followed
// by an optional ": reason", and names the dispatch it is about (the
// Result.Ref of that round): it settles only that dispatch.
const (
	ConfirmIncluded = "included"
	ConfirmFailed   = "failed"
)

// Poller is implemented by handlers of functions that wait for inclusion:
// the worker asks it, every Inclusion.PollEvery, whether the effect the
// handler dispatched under ref (its Result.Ref) was included. It returns
// included true once it was, a non-nil failed once it never will be (the
// function then fails and is retried under its retry logic), and neither
// while it cannot tell yet. Poll must be safe for concurrent use and cheap:
// it is a read, asked again and again.
type Poller interface {
	Poll(ctx context.Context, call *Call, ref string) (included bool, failed error)
}

// SuccessHook is implemented by handlers of functions that wait for
// inclusion and want to act once the effect was included. The worker calls
// it exactly once per function (its call is recorded like a function's),
// only after the inclusion was recorded (the function can no longer fail),
// with the result the handler returned for the included dispatch. An error is logged and
// does not undo the success.
type SuccessHook interface {
	OnSuccess(ctx context.Context, call *Call, res Result) error
}

// FailureHook is implemented by handlers of functions that wait for
// inclusion and want to act once the function finally failed (retries
// exhausted, or a failure not retryable). The worker calls it exactly once
// per function. An error is logged and changes nothing.
type FailureHook interface {
	OnFailure(ctx context.Context, call *Call, f Failure) error
}

// NeedsSender reports whether any function of the batch needs a sender:
// then the batch holds one sender of its domain's pool from its first step
// until it is terminal.
func (b *Batch) NeedsSender() bool {
	for i := range b.Functions {
		if b.Functions[i].Sender {
			return true
		}
	}
	return false
}
