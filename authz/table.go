package authz

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"go.yaml.in/yaml/v3"
)

// Anyone in a label's users lets every identity submit under it.
const Anyone = "*"

// Label is one entry of the authorization table: who may submit batches
// under it and how those batches are executed.
type Label struct {
	// Domain is the processor that executes the batches.
	Domain string `yaml:"domain" json:"domain"`
	// Users may submit under the label; "*" means anyone.
	Users []string `yaml:"users" json:"users"`
	// Mode is atomic or non_atomic.
	Mode pipeline.Mode `yaml:"mode" json:"mode"`
	// Priority is high or med.
	Priority pipeline.Priority `yaml:"priority" json:"priority"`
	// Retry is the batch-level retry logic of atomic batches.
	Retry *pipeline.RetryLogic `yaml:"retry,omitempty" json:"retry,omitempty"`
	// Functions lists the function types allowed, with their settings.
	Functions map[string]FunctionRule `yaml:"functions" json:"functions"`
	// Expiry, when set, is how long after submission a batch expires.
	Expiry pipeline.Duration `yaml:"expiry,omitempty" json:"expiry,omitempty"`
	// MaxConcurrent bounds the label's batches in process at once; 0: no bound.
	MaxConcurrent int `yaml:"max_concurrent,omitempty" json:"max_concurrent,omitempty"`
	// MaxFunctions bounds the functions of one batch under the label; 0:
	// DefaultSenderMaxFunctions for a batch with a function that needs a
	// sender (it holds the sender until it ends), else only
	// pipeline.MaxFunctions.
	MaxFunctions int `yaml:"max_functions,omitempty" json:"max_functions,omitempty"`
	// MaxPerKey bounds each submitter's unfinished batches on one key under
	// the label; 0: DefaultMaxPerKey (Label.KeyBound).
	MaxPerKey int `yaml:"max_per_key,omitempty" json:"max_per_key,omitempty"`
	// MaxPerSubmitter bounds the unfinished batches one submitter has under
	// the label: one more is refused with 429 until one of them finishes.
	// 0: no bound.
	MaxPerSubmitter int `yaml:"max_per_submitter,omitempty" json:"max_per_submitter,omitempty"`
	// MaxDelay bounds how far ahead a send may schedule a batch under the
	// label (its run_at or delay); 0: DefaultMaxDelay.
	MaxDelay pipeline.Duration `yaml:"max_delay,omitempty" json:"max_delay,omitempty"`
}

// DefaultSenderMaxFunctions is the most functions a batch that needs a
// sender may hold under a label that sets no max_functions: the batch
// holds its sender from its first step until it ends, so its size bounds
// how long the others wait for that sender.
const DefaultSenderMaxFunctions = 100

// FunctionRule is how one function type runs under a label.
type FunctionRule struct {
	// Retry is the function's retry logic in a non-atomic batch.
	Retry *pipeline.RetryLogic `yaml:"retry,omitempty" json:"retry,omitempty"`
	// Confirm, when set, makes the function wait for a confirmation; the
	// caller gives the expected content with each call.
	Confirm *ConfirmRule `yaml:"confirm,omitempty" json:"confirm,omitempty"`
	// Sender, when true, makes a batch with this function hold a sender of
	// its domain's pool while it runs.
	Sender bool `yaml:"sender,omitempty" json:"sender,omitempty"`
	// Inclusion, when set, makes the function's success mean "dispatched":
	// the batch waits until the dispatch is included (pipeline.Inclusion).
	Inclusion *pipeline.Inclusion `yaml:"inclusion,omitempty" json:"inclusion,omitempty"`
}

// ConfirmRule says who may confirm a function and how long to wait.
type ConfirmRule struct {
	Timeout pipeline.Duration `yaml:"timeout" json:"timeout"`
	By      []string          `yaml:"by,omitempty" json:"by,omitempty"`
}

// Table is the authorization table: labels by name, and what each domain
// allows whatever the label.
type Table struct {
	Labels map[string]*Label `yaml:"labels" json:"labels"`
	// Domains, optional, holds per-domain rules (DomainRule).
	Domains map[string]*DomainRule `yaml:"domains,omitempty" json:"domains,omitempty"`
	// Callers, optional, bounds what each caller may cost the others
	// (Caller); "*" holds everyone's defaults.
	Callers map[string]*Caller `yaml:"callers,omitempty" json:"callers,omitempty"`
	// Schedules, optional, are batches authz sends on its own once per
	// period (Schedule), by name.
	Schedules map[string]*Schedule `yaml:"schedules,omitempty" json:"schedules,omitempty"`
}

// LoadTable reads and validates a YAML authorization table. Unknown keys
// are errors.
func LoadTable(path string) (*Table, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("authz: read authorization table: %w", err)
	}
	return ParseTable(b)
}

// ParseTable parses and validates a YAML authorization table.
func ParseTable(b []byte) (*Table, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var t Table
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTable, err)
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Validate reports the first broken rule, naming the label and field.
func (t *Table) Validate() error {
	if len(t.Labels) == 0 {
		return fmt.Errorf("%w: no labels", ErrTable)
	}
	names := make([]string, 0, len(t.Labels))
	for n := range t.Labels {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		l := t.Labels[n]
		fail := func(field string, err error) error {
			return fmt.Errorf("%w: labels.%s.%s: %w", ErrTable, n, field, err)
		}
		if l == nil {
			return fmt.Errorf("%w: labels.%s: empty", ErrTable, n)
		}
		if err := pipeline.ValidateDomain(l.Domain); err != nil {
			return fail("domain", err)
		}
		if len(l.Users) == 0 {
			return fail("users", errors.New(`must list users, or "*" for anyone`))
		}
		if err := l.Priority.Validate(); err != nil {
			return fail("priority", err)
		}
		if l.Mode != pipeline.Atomic && l.Mode != pipeline.NonAtomic {
			return fail("mode", fmt.Errorf("must be atomic or non_atomic (got %q)", l.Mode))
		}
		if l.Retry != nil {
			if l.Mode != pipeline.Atomic {
				return fail("retry", errors.New("applies to atomic labels; give non-atomic functions their own retry"))
			}
			if err := l.Retry.Validate(); err != nil {
				return fail("retry", err)
			}
		}
		if len(l.Functions) == 0 {
			return fail("functions", errors.New("must allow at least one function type"))
		}
		for typ, r := range l.Functions {
			if err := pipeline.ValidateType(typ); err != nil {
				return fail("functions", err)
			}
			if r.Retry != nil {
				if l.Mode == pipeline.Atomic {
					return fail("functions."+typ+".retry", errors.New("not allowed in an atomic label: set the label's retry"))
				}
				if err := r.Retry.Validate(); err != nil {
					return fail("functions."+typ+".retry", err)
				}
			}
			if r.Confirm != nil {
				if l.Mode == pipeline.Atomic {
					return fail("functions."+typ+".confirm", errors.New("not allowed in an atomic label"))
				}
				if r.Confirm.Timeout <= 0 {
					return fail("functions."+typ+".confirm.timeout", errors.New("must be a positive duration"))
				}
			}
			if err := r.validateInclusion(l.Mode); err != nil {
				return fail("functions."+typ+".inclusion", err)
			}
		}
		if l.Expiry < 0 {
			return fail("expiry", errors.New("must not be negative"))
		}
		if l.MaxConcurrent < 0 {
			return fail("max_concurrent", errors.New("must not be negative"))
		}
		if l.MaxFunctions < 0 || l.MaxFunctions > pipeline.MaxFunctions {
			return fail("max_functions", fmt.Errorf("must be between 1 and %d, or 0 for the default (got %d)", pipeline.MaxFunctions, l.MaxFunctions))
		}
		if l.MaxPerKey < 0 {
			return fail("max_per_key", errors.New("must not be negative"))
		}
		if l.MaxPerSubmitter < 0 {
			return fail("max_per_submitter", errors.New("must not be negative"))
		}
		if l.MaxDelay < 0 {
			return fail("max_delay", errors.New("must not be negative"))
		}
	}
	if err := t.validateCallers(); err != nil {
		return err
	}
	if err := t.validateDomains(); err != nil {
		return err
	}
	return t.validateSchedules(time.Now())
}

// functionBound is the most functions a batch under the label may hold:
// MaxFunctions, or by default DefaultSenderMaxFunctions for a batch that
// needs a sender and pipeline.MaxFunctions for any other.
func (l *Label) functionBound(needsSender bool) int {
	switch {
	case l.MaxFunctions > 0:
		return l.MaxFunctions
	case needsSender:
		return DefaultSenderMaxFunctions
	}
	return pipeline.MaxFunctions
}

// Allows reports whether user may submit under the label.
func (l *Label) Allows(user string) bool {
	return slices.Contains(l.Users, Anyone) || slices.Contains(l.Users, user)
}

// Build turns a submission under the label into a batch, or says what is
// wrong with it.
func (l *Label) Build(label, user string, calls []api.CallSpec, key string, now time.Time) (*pipeline.Batch, error) {
	b := &pipeline.Batch{
		Domain: l.Domain, Label: label, Submitter: user, Priority: l.Priority, Key: key,
		Subroutine: pipeline.Subroutine{Mode: l.Mode, Retry: l.Retry},
	}
	if l.Expiry > 0 {
		b.ExpiresAt = now.Add(l.Expiry.D()).UTC()
	}
	if len(calls) == 0 {
		return nil, &pipeline.ValidationError{Field: "functions", Rule: "must hold at least one function"}
	}
	for i, c := range calls {
		rule, ok := l.Functions[c.Type]
		if !ok {
			allowed := make([]string, 0, len(l.Functions))
			for t := range l.Functions {
				allowed = append(allowed, t)
			}
			sort.Strings(allowed)
			return nil, &pipeline.ValidationError{Field: fmt.Sprintf("functions[%d].type", i), Rule: fmt.Sprintf("%q is not allowed under label %q (allowed: %v)", logging.Capped(c.Type), label, allowed)}
		}
		f := pipeline.Function{Type: c.Type, Payload: c.Payload, Retry: rule.Retry, Sender: rule.Sender, Inclusion: rule.Inclusion}
		switch {
		case rule.Confirm != nil && c.Expect == "":
			return nil, &pipeline.ValidationError{Field: fmt.Sprintf("functions[%d].expect", i), Rule: fmt.Sprintf("%q needs a confirmation: give the expected content", c.Type)}
		case rule.Confirm == nil && c.Expect != "":
			return nil, &pipeline.ValidationError{Field: fmt.Sprintf("functions[%d].expect", i), Rule: fmt.Sprintf("%q takes no confirmation under label %q", c.Type, label)}
		case rule.Confirm != nil:
			f.Confirm = &pipeline.Confirmation{Expect: c.Expect, Timeout: rule.Confirm.Timeout, By: rule.Confirm.By}
		}
		b.Functions = append(b.Functions, f)
	}
	if bound := l.functionBound(b.NeedsSender()); bound < pipeline.MaxFunctions && len(b.Functions) > bound {
		rule := fmt.Sprintf("must hold at most %d functions under label %q (max_functions; got %d)", bound, label, len(b.Functions))
		if b.NeedsSender() {
			rule += ": a batch that needs a sender holds it until the batch ends, and the bound keeps the wait of the others short; split the batch"
		}
		return nil, &pipeline.ValidationError{Field: "functions", Rule: rule}
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}
