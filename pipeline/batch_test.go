package pipeline_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// validBatch returns a non-atomic batch that breaks no rule; each test case
// breaks exactly one.
func validBatch() pipeline.Batch {
	return pipeline.Batch{
		ID:       7,
		Domain:   "payments",
		Priority: pipeline.High,
		Subroutine: pipeline.Subroutine{
			Mode: pipeline.NonAtomic,
		},
		Functions: []pipeline.Function{
			{Type: "ledger_transfer", Payload: pipeline.MustPayload(map[string]any{"amount": 10})},
			{
				Type:    "ledger_notify",
				Retry:   &pipeline.RetryLogic{Times: 3, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(time.Second)}},
				Confirm: &pipeline.Confirmation{Expect: "included", Timeout: pipeline.Duration(time.Minute)},
			},
		},
		Key:       "acct-1",
		CreatedAt: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC),
	}
}

func validAtomicBatch() pipeline.Batch {
	b := validBatch()
	b.Subroutine = pipeline.Subroutine{
		Mode:  pipeline.Atomic,
		Retry: &pipeline.RetryLogic{Times: 2, Backoff: pipeline.Backoff{Kind: pipeline.Linear, Initial: pipeline.Duration(time.Second), Increment: pipeline.Duration(time.Second)}},
	}
	for i := range b.Functions {
		b.Functions[i].Retry, b.Functions[i].Confirm = nil, nil
	}
	return b
}

func TestBatchValidateAcceptsValidBatches(t *testing.T) {
	tests := []struct {
		name  string
		batch pipeline.Batch
	}{
		{name: "non-atomic with retry and confirmation", batch: validBatch()},
		{name: "atomic with batch retry", batch: validAtomicBatch()},
		{name: "atomic without retry", batch: func() pipeline.Batch {
			b := validAtomicBatch()
			b.Subroutine.Retry = nil
			return b
		}()},
		{name: "med priority, no key", batch: func() pipeline.Batch {
			b := validBatch()
			b.Priority, b.Key = pipeline.Med, ""
			return b
		}()},
		{name: "exactly MaxFunctions", batch: func() pipeline.Batch {
			b := validBatch()
			b.Functions = make([]pipeline.Function, pipeline.MaxFunctions)
			for i := range b.Functions {
				b.Functions[i].Type = "noop"
			}
			return b
		}()},
		{name: "domain of 128 bytes", batch: func() pipeline.Batch {
			b := validBatch()
			b.Domain = strings.Repeat("d", 128)
			return b
		}()},
		{name: "dotted function type", batch: func() pipeline.Batch {
			b := validBatch()
			b.Functions[0].Type = "ledger.transfer"
			return b
		}()},
		{name: "unicode domain", batch: func() pipeline.Batch {
			b := validBatch()
			b.Domain = "zahlungen-ü"
			return b
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.batch.Validate(); err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestBatchValidateRejects(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(b *pipeline.Batch)
		// field is the exact path the *ValidationError must name.
		field string
		// rule is a fragment the explanation must contain.
		rule string
	}{
		{name: "empty functions", field: "functions", rule: "at least one",
			mutate: func(b *pipeline.Batch) { b.Functions = nil }},
		{name: "too many functions", field: "functions", rule: "at most 1000",
			mutate: func(b *pipeline.Batch) {
				b.Functions = make([]pipeline.Function, pipeline.MaxFunctions+1)
				for i := range b.Functions {
					b.Functions[i].Type = "noop"
				}
			}},
		{name: "unknown priority", field: "priority", rule: `got "urgent"`,
			mutate: func(b *pipeline.Batch) { b.Priority = "urgent" }},
		{name: "empty priority", field: "priority", rule: `got ""`,
			mutate: func(b *pipeline.Batch) { b.Priority = "" }},
		{name: "priority is case sensitive", field: "priority", rule: `got "HIGH"`,
			mutate: func(b *pipeline.Batch) { b.Priority = "HIGH" }},
		{name: "unknown mode", field: "subroutine.mode", rule: `got "eventually"`,
			mutate: func(b *pipeline.Batch) { b.Subroutine.Mode = "eventually" }},
		{name: "empty mode", field: "subroutine.mode", rule: `got ""`,
			mutate: func(b *pipeline.Batch) { b.Subroutine.Mode = "" }},
		{name: "empty domain", field: "domain", rule: "must not be empty",
			mutate: func(b *pipeline.Batch) { b.Domain = "" }},
		{name: "domain with dot", field: "domain", rule: `found "." at 3`,
			mutate: func(b *pipeline.Batch) { b.Domain = "pay.ments" }},
		{name: "domain with star", field: "domain", rule: `found "*" at 0`,
			mutate: func(b *pipeline.Batch) { b.Domain = "*" }},
		{name: "domain with greater-than", field: "domain", rule: `found ">" at 3`,
			mutate: func(b *pipeline.Batch) { b.Domain = "pay>" }},
		{name: "domain with space", field: "domain", rule: `found " " at 3`,
			mutate: func(b *pipeline.Batch) { b.Domain = "pay ments" }},
		{name: "domain with tab", field: "domain", rule: "must not contain",
			mutate: func(b *pipeline.Batch) { b.Domain = "pay\tments" }},
		{name: "domain with control character", field: "domain", rule: "must not contain",
			mutate: func(b *pipeline.Batch) { b.Domain = "pay\x00" }},
		{name: "domain with invalid UTF-8", field: "domain", rule: "must not contain",
			mutate: func(b *pipeline.Batch) { b.Domain = "pay\xff" }},
		{name: "domain over 128 bytes", field: "domain", rule: "at most 128 bytes (got 129)",
			mutate: func(b *pipeline.Batch) { b.Domain = strings.Repeat("d", 129) }},
		{name: "empty function type", field: "functions[0].type", rule: "must not be empty",
			mutate: func(b *pipeline.Batch) { b.Functions[0].Type = "" }},
		{name: "function type with space names its index", field: "functions[1].type", rule: "may hold only",
			mutate: func(b *pipeline.Batch) { b.Functions[1].Type = "a b" }},
		{name: "function type with wildcard", field: "functions[0].type", rule: "may hold only",
			mutate: func(b *pipeline.Batch) { b.Functions[0].Type = "ledger.*" }},
		{name: "function type with empty part", field: "functions[0].type", rule: "empty dot-separated parts",
			mutate: func(b *pipeline.Batch) { b.Functions[0].Type = "ledger..transfer" }},
		{name: "bad key", field: "key", rule: "must not contain",
			mutate: func(b *pipeline.Batch) { b.Key = "a b" }},
		{name: "retry in atomic function", field: "functions[1].retry", rule: "set subroutine.retry instead",
			mutate: func(b *pipeline.Batch) {
				*b = validAtomicBatch()
				b.Functions[1].Retry = &pipeline.NoRetry
			}},
		{name: "confirm in atomic function", field: "functions[0].confirm", rule: "not allowed in an atomic batch",
			mutate: func(b *pipeline.Batch) {
				*b = validAtomicBatch()
				b.Functions[0].Confirm = &pipeline.Confirmation{Expect: "x", Timeout: pipeline.Duration(time.Second)}
			}},
		{name: "zero confirm timeout", field: "functions[1].confirm.timeout", rule: "positive duration (got 0s)",
			mutate: func(b *pipeline.Batch) { b.Functions[1].Confirm.Timeout = 0 }},
		{name: "negative confirm timeout", field: "functions[1].confirm.timeout", rule: "got -1s",
			mutate: func(b *pipeline.Batch) { b.Functions[1].Confirm.Timeout = pipeline.Duration(-time.Second) }},
		{name: "subroutine.retry on non-atomic", field: "subroutine.retry", rule: "atomic batches only",
			mutate: func(b *pipeline.Batch) { b.Subroutine.Retry = &pipeline.NoRetry }},
		{name: "bad subroutine.retry is prefixed", field: "subroutine.retry.backoff.multiplier", rule: "must be > 1",
			mutate: func(b *pipeline.Batch) {
				*b = validAtomicBatch()
				b.Subroutine.Retry.Backoff = pipeline.Backoff{Kind: pipeline.Exponential, Initial: pipeline.Duration(time.Second), Multiplier: 1}
			}},
		{name: "bad function retry is prefixed", field: "functions[1].retry.backoff.initial", rule: "positive duration",
			mutate: func(b *pipeline.Batch) { b.Functions[1].Retry.Backoff.Initial = 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := validBatch()
			tt.mutate(&b)
			err := b.Validate()
			if !errors.Is(err, pipeline.ErrInvalid) {
				t.Fatalf("Validate() = %v, want an error matching ErrInvalid", err)
			}
			var ve *pipeline.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %T, want *ValidationError", err)
			}
			if ve.Field != tt.field {
				t.Errorf("Field = %q, want %q (error: %v)", ve.Field, tt.field, err)
			}
			if !strings.Contains(ve.Rule, tt.rule) {
				t.Errorf("Rule = %q, want it to contain %q", ve.Rule, tt.rule)
			}
			if want := "pipeline: invalid " + tt.field + ": "; !strings.HasPrefix(err.Error(), want) {
				t.Errorf("Error() = %q, want prefix %q", err.Error(), want)
			}
		})
	}
}

func TestValidationErrorMatchesOnlyErrInvalid(t *testing.T) {
	err := (&pipeline.Batch{}).Validate()
	if errors.Is(err, pipeline.ErrPermanent) || errors.Is(err, pipeline.ErrNoHandler) {
		t.Fatalf("validation error %v matches an unrelated sentinel", err)
	}
}

func TestValidateDomain(t *testing.T) {
	tests := []struct {
		name    string
		domain  string
		wantErr bool
	}{
		{name: "plain", domain: "payments"},
		{name: "dashes and underscores", domain: "pay-ments_2"},
		{name: "empty", domain: "", wantErr: true},
		{name: "dot", domain: "a.b", wantErr: true},
		{name: "star", domain: "a*", wantErr: true},
		{name: "greater-than", domain: "a>", wantErr: true},
		{name: "space", domain: "a b", wantErr: true},
		{name: "newline", domain: "a\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pipeline.ValidateDomain(tt.domain)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ValidateDomain(%q) = %v, want error %v", tt.domain, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, pipeline.ErrInvalid) {
				t.Fatalf("ValidateDomain(%q) = %v, want ErrInvalid", tt.domain, err)
			}
		})
	}
}

// TestValidateTypeAllocatesNothing: every type of every call of every
// send is checked, on both sides of the API.
func TestValidateTypeAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = pipeline.ValidateType("ledger.transfer-v2") }); n != 0 {
		t.Fatalf("ValidateType of a valid type allocates %v times", n)
	}
}

func TestValidateType(t *testing.T) {
	tests := []struct {
		name string
		typ  string
		rule string // empty: valid
	}{
		{name: "plain", typ: "transfer"},
		{name: "dotted", typ: "ledger.transfer"},
		{name: "digits, dash and underscore", typ: "v2.ledger-x_y"},
		{name: "128 bytes", typ: strings.Repeat("t", 128)},
		{name: "empty", typ: "", rule: "must not be empty"},
		{name: "129 bytes", typ: strings.Repeat("t", 129), rule: "at most 128 bytes"},
		{name: "leading dot", typ: ".transfer", rule: "empty dot-separated parts"},
		{name: "trailing dot", typ: "transfer.", rule: "empty dot-separated parts"},
		{name: "star", typ: "ledger.*", rule: "may hold only"},
		{name: "greater-than", typ: "ledger.>", rule: "may hold only"},
		{name: "space", typ: "led ger", rule: "may hold only"},
		{name: "non-ASCII letter", typ: "überweisung", rule: "may hold only"},
		{name: "names the letter", typ: "ledger.überweisung", rule: "(found 'ü')"},
		{name: "double dot", typ: "ledger..transfer", rule: "empty dot-separated parts"},
		{name: "only a dot", typ: ".", rule: "empty dot-separated parts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pipeline.ValidateType(tt.typ)
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("ValidateType(%q) = %v, want nil", tt.typ, err)
				}
				return
			}
			var ve *pipeline.ValidationError
			if !errors.Is(err, pipeline.ErrInvalid) || !errors.As(err, &ve) {
				t.Fatalf("ValidateType(%q) = %v, want a *ValidationError", tt.typ, err)
			}
			if ve.Field != "type" || !strings.Contains(ve.Rule, tt.rule) {
				t.Fatalf("ValidateType(%q) = %v, want field type and a rule containing %q", tt.typ, err, tt.rule)
			}
		})
	}
}

func TestBatchRetryFor(t *testing.T) {
	atomic := validAtomicBatch()
	nonAtomic := validBatch()
	tests := []struct {
		name  string
		batch pipeline.Batch
		index int
		want  *pipeline.RetryLogic
	}{
		{name: "atomic uses the batch's logic", batch: atomic, index: 1, want: atomic.Subroutine.Retry},
		{name: "non-atomic uses the function's logic", batch: nonAtomic, index: 1, want: nonAtomic.Functions[1].Retry},
		{name: "non-atomic function without logic gets NoRetry", batch: nonAtomic, index: 0, want: &pipeline.NoRetry},
		{name: "index out of range gets NoRetry", batch: nonAtomic, index: 5, want: &pipeline.NoRetry},
		{name: "negative index gets NoRetry", batch: nonAtomic, index: -1, want: &pipeline.NoRetry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.batch.RetryFor(tt.index); got != tt.want {
				t.Fatalf("RetryFor(%d) = %+v, want %+v", tt.index, got, tt.want)
			}
		})
	}
}

func TestBatchExpired(t *testing.T) {
	at := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		expires time.Time
		now     time.Time
		want    bool
	}{
		{name: "no expiry", now: at.Add(100 * 365 * 24 * time.Hour), want: false},
		{name: "before", expires: at, now: at.Add(-time.Nanosecond), want: false},
		{name: "at", expires: at, now: at, want: true},
		{name: "after", expires: at, now: at.Add(time.Nanosecond), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := validBatch()
			b.ExpiresAt = tt.expires
			if got := b.Expired(tt.now); got != tt.want {
				t.Fatalf("Expired(%s) = %v, want %v", tt.now, got, tt.want)
			}
		})
	}
}
