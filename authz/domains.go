package authz

import (
	"fmt"
	"slices"
	"sort"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// DomainRule is what a domain allows whatever the label a batch comes
// under: the domains: section of the authorization table.
type DomainRule struct {
	// AllowedTypes, when set, are the only function types the domain
	// runs: a submission (or insert) with another type is refused with a
	// 400 naming it and the list, before anything is recorded or queued,
	// so it never joins a key's order. Every label of the domain may list
	// only these. Empty: the labels alone decide.
	AllowedTypes []string `yaml:"allowed_types,omitempty" json:"allowed_types,omitempty"`
}

// validateDomains checks the domains: section: each name one subject
// token, each allowed type valid, and no label of a domain listing a type
// the domain does not allow.
func (t *Table) validateDomains() error {
	names := make([]string, 0, len(t.Domains))
	for n := range t.Domains {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, d := range names {
		r := t.Domains[d]
		if err := pipeline.ValidateDomain(d); err != nil {
			return fmt.Errorf("%w: domains.%s: %w", ErrTable, logging.Capped(d), err)
		}
		if r == nil {
			continue
		}
		for i, typ := range r.AllowedTypes {
			if err := pipeline.ValidateType(typ); err != nil {
				return fmt.Errorf("%w: domains.%s.allowed_types[%d]: %w", ErrTable, d, i, err)
			}
		}
	}
	labels := make([]string, 0, len(t.Labels))
	for n := range t.Labels {
		labels = append(labels, n)
	}
	sort.Strings(labels)
	for _, n := range labels {
		l := t.Labels[n]
		r, ok := t.Domains[l.Domain]
		if !ok || r == nil || len(r.AllowedTypes) == 0 {
			continue
		}
		types := make([]string, 0, len(l.Functions))
		for typ := range l.Functions {
			types = append(types, typ)
		}
		sort.Strings(types)
		for _, typ := range types {
			if !slices.Contains(r.AllowedTypes, typ) {
				return fmt.Errorf("%w: labels.%s.functions: %q is not among the allowed types of domain %q %v", ErrTable, n, typ, l.Domain, r.AllowedTypes)
			}
		}
	}
	return nil
}

// allowedTypes refuses, as a bad request, a function type domain does not
// allow, naming it and the allowed list.
func (t *Table) allowedTypes(domain string, calls []api.CallSpec) error {
	types := make([]string, len(calls))
	for i, c := range calls {
		types[i] = c.Type
	}
	return t.allowed(domain, types)
}

// allowedFunctions is allowedTypes for a recorded batch's functions.
func (t *Table) allowedFunctions(domain string, fns []pipeline.Function) error {
	types := make([]string, len(fns))
	for i, f := range fns {
		types[i] = f.Type
	}
	return t.allowed(domain, types)
}

func (t *Table) allowed(domain string, types []string) error {
	r, ok := t.Domains[domain]
	if !ok || r == nil || len(r.AllowedTypes) == 0 {
		return nil
	}
	for i, typ := range types {
		if !slices.Contains(r.AllowedTypes, typ) {
			return errf(api.CodeBadRequest, "authz: functions[%d].type: function type %q is not allowed in domain %q (allowed: %v)", i, logging.Capped(typ), domain, r.AllowedTypes)
		}
	}
	return nil
}

// hasDomain says whether domain is one the table names: a label's, or one
// with rules of its own.
func (t *Table) hasDomain(domain string) bool {
	if _, ok := t.Domains[domain]; ok {
		return true
	}
	for _, l := range t.Labels {
		if l.Domain == domain {
			return true
		}
	}
	return false
}
