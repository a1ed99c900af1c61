package pipeline

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Forever is the Times value of a retry logic that never gives up.
const Forever Times = -1

// Times is how many times a failed batch or function is retried after its
// first attempt: a count ≥ 0, or Forever. In JSON it is a number or the
// string "indefinitely".
type Times int

// MarshalText writes Forever as "indefinitely" and counts as numbers.
func (t Times) MarshalText() ([]byte, error) {
	if t == Forever {
		return []byte("indefinitely"), nil
	}
	return []byte(strconv.Itoa(int(t))), nil
}

// MarshalJSON writes counts as JSON numbers and Forever as "indefinitely".
func (t Times) MarshalJSON() ([]byte, error) {
	if t == Forever {
		return []byte(`"indefinitely"`), nil
	}
	return []byte(strconv.Itoa(int(t))), nil
}

// UnmarshalJSON accepts a number ≥ 0 or the string "indefinitely".
func (t *Times) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	return t.UnmarshalText([]byte(s))
}

// UnmarshalText accepts a count ≥ 0 or "indefinitely".
func (t *Times) UnmarshalText(b []byte) error {
	if string(b) == "indefinitely" {
		*t = Forever
		return nil
	}
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 {
		return fmt.Errorf("pipeline: times %q: expected a count ≥ 0 or \"indefinitely\"", b)
	}
	*t = Times(n)
	return nil
}

// BackoffKind selects how the delay grows from one retry to the next.
type BackoffKind string

// The backoff kinds.
const (
	// Fixed waits Initial before every retry.
	Fixed BackoffKind = "fixed"
	// Linear waits min(Initial + Increment·(n−1), Max) before retry n.
	Linear BackoffKind = "linear"
	// Exponential waits min(Initial·Multiplier^(n−1), Max) before retry n.
	Exponential BackoffKind = "exponential"
)

// Backoff computes the delay before each retry. The zero Max means no cap.
type Backoff struct {
	Kind       BackoffKind `msgpack:"kind" json:"kind" yaml:"kind"`
	Initial    Duration    `msgpack:"initial" json:"initial" yaml:"initial"`
	Increment  Duration    `msgpack:"increment,omitempty" json:"increment,omitempty" yaml:"increment,omitempty"`
	Multiplier float64     `msgpack:"multiplier,omitempty" json:"multiplier,omitempty" yaml:"multiplier,omitempty"`
	Max        Duration    `msgpack:"max,omitempty" json:"max,omitempty" yaml:"max,omitempty"`
}

// RetryLogic is the retry policy shared by atomic batches and the functions
// of non-atomic ones: how many retries, how long to wait before each, and
// which errors are worth retrying at all.
//
// Which errors are retried: an error marked Permanent, or one whose
// chain carries a code listed in NonRetryable, is never retried; with RetryOn
// empty every other error is; with RetryOn set only errors carrying one of its
// codes are. Codes are attached with WithCode or by implementing Coder; they
// travel across the wire where Go error values (and functions) cannot, so a
// code is the only way to name which errors a batch retries.
type RetryLogic struct {
	// Times is the number of retries after the first attempt (total attempts =
	// Times + 1), or Forever.
	Times Times `msgpack:"times" json:"times" yaml:"times"`
	// Backoff computes the delay before each retry.
	Backoff Backoff `msgpack:"backoff" json:"backoff" yaml:"backoff"`
	// Jitter spreads each delay uniformly over [max(d−Jitter, 0), d+Jitter]. Zero: none.
	Jitter Duration `msgpack:"jitter,omitempty" json:"jitter,omitempty" yaml:"jitter,omitempty"`
	// NonRetryable lists error codes that are never retried.
	NonRetryable []string `msgpack:"non_retryable,omitempty" json:"non_retryable,omitempty" yaml:"non_retryable,omitempty"`
	// RetryOn, when set, lists the only error codes that are retried.
	RetryOn []string `msgpack:"retry_on,omitempty" json:"retry_on,omitempty" yaml:"retry_on,omitempty"`
}

// NoRetry is the logic of a batch or function that gets exactly one attempt.
var NoRetry = RetryLogic{Times: 0, Backoff: Backoff{Kind: Fixed, Initial: Duration(time.Second)}}

// Validate reports the first rule the logic breaks, as a *ValidationError.
func (r *RetryLogic) Validate() error {
	if r.Times < Forever {
		return invalid("times", "must be ≥ 0 or indefinitely (got %d)", r.Times)
	}
	b := r.Backoff
	if b.Initial <= 0 {
		return invalid("backoff.initial", "must be a positive duration (got %s)", b.Initial)
	}
	if b.Max < 0 {
		return invalid("backoff.max", "must not be negative (got %s)", b.Max)
	}
	if b.Max != 0 && b.Max < b.Initial {
		return invalid("backoff.max", "must be ≥ backoff.initial %s or zero for no cap (got %s)", b.Initial, b.Max)
	}
	switch b.Kind {
	case Fixed:
	case Linear:
		if b.Increment < 0 {
			return invalid("backoff.increment", "must not be negative (got %s)", b.Increment)
		}
	case Exponential:
		if !(b.Multiplier > 1) || math.IsInf(b.Multiplier, 0) {
			return invalid("backoff.multiplier", "must be > 1 for exponential backoff (got %g)", b.Multiplier)
		}
	default:
		return invalid("backoff.kind", "must be fixed, linear or exponential (got %q)", b.Kind)
	}
	if r.Jitter < 0 {
		return invalid("jitter", "must not be negative (got %s)", r.Jitter)
	}
	for i, c := range r.NonRetryable {
		if c == "" {
			return invalid(fmt.Sprintf("non_retryable[%d]", i), "must not be empty")
		}
	}
	for i, c := range r.RetryOn {
		if c == "" {
			return invalid(fmt.Sprintf("retry_on[%d]", i), "must not be empty")
		}
	}
	return nil
}

// Base returns the delay before retry n (n ≥ 1) without jitter.
func (r *RetryLogic) Base(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	b := r.Backoff
	capped := func(d float64) time.Duration {
		if b.Max > 0 && d >= float64(b.Max) {
			return b.Max.D()
		}
		if d >= math.MaxInt64 {
			return time.Duration(math.MaxInt64)
		}
		return time.Duration(d)
	}
	switch b.Kind {
	case Linear:
		return capped(float64(b.Initial) + float64(b.Increment)*float64(n-1))
	case Exponential:
		return capped(float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1)))
	default:
		return capped(float64(b.Initial))
	}
}

// Delay returns the delay before retry n (n ≥ 1), with jitter drawn from
// rnd, a source of uniform values in [0, 1) such as rand.Float64.
func (r *RetryLogic) Delay(n int, rnd func() float64) time.Duration {
	d := r.Base(n)
	if r.Jitter <= 0 || rnd == nil {
		return d
	}
	lo := max(d-r.Jitter.D(), 0)
	hi := d + r.Jitter.D()
	if hi < d { // saturated base: do not overflow into a negative delay
		hi = time.Duration(math.MaxInt64)
	}
	return min(lo+time.Duration(rnd()*(float64(hi-lo)+1)), hi)
}

// Exhausted reports whether a batch or function that has failed `failures`
// times has no retry left.
func (r *RetryLogic) Exhausted(failures int) bool {
	return r.Times != Forever && failures > int(r.Times)
}

// Retryable reports whether err is worth another attempt under this logic,
// ignoring how many attempts are left (see Exhausted).
func (r *RetryLogic) Retryable(err error) bool {
	return r.RetryableCodes(IsPermanent(err), Codes(err))
}

// RetryableCodes is Retryable for an error that has crossed the wire as a
// permanence flag and its codes.
func (r *RetryLogic) RetryableCodes(permanent bool, codes []string) bool {
	if permanent {
		return false
	}
	for _, c := range codes {
		if slices.Contains(r.NonRetryable, c) {
			return false
		}
	}
	if len(r.RetryOn) == 0 {
		return true
	}
	for _, c := range codes {
		if slices.Contains(r.RetryOn, c) {
			return true
		}
	}
	return false
}

// Coder is implemented by errors that carry a stable code for retry rules.
type Coder interface{ Code() string }

type codedError struct {
	code string
	err  error
}

func (c *codedError) Error() string { return c.err.Error() }
func (c *codedError) Unwrap() error { return c.err }
func (c *codedError) Code() string  { return c.code }

// WithCode attaches code to err for the NonRetryable and RetryOn rules.
// WithCode(code, nil) returns nil.
func WithCode(code string, err error) error {
	if err == nil {
		return nil
	}
	return &codedError{code: code, err: err}
}

// Codes returns every code carried along err's chain, outermost first.
func Codes(err error) []string {
	var out []string
	walk(err, func(e error) {
		if c, ok := e.(Coder); ok && c.Code() != "" {
			out = append(out, c.Code())
		}
	})
	return out
}

// walk visits err and everything it wraps, depth first.
func walk(err error, visit func(error)) {
	for err != nil {
		visit(err)
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e, visit)
			}
			return
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return
		}
	}
}
