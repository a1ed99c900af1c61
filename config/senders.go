package config

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/worker"
)

// A domain's sender pool is written as a list of "<domain>/<name>" entries
// in the processor section (the processor needs the names only) and of
// "<domain>/<name>=<secret reference>" entries in the worker section (the
// worker resolves the reference: "env:NAME" or "file:/path"). A list of
// strings, so TICKFLOW_PROCESSOR_SENDERS and TICKFLOW_WORKER_SENDERS set
// it like any other list; the secret itself is never in the configuration.

// SenderSpec is one parsed senders entry.
type SenderSpec struct {
	Domain, Name string
	// Secret is the secret reference; empty in the processor section.
	Secret string
}

// ParseSender reads one senders entry; withSecret demands the
// "=<secret reference>" part, and without it the part is refused.
func ParseSender(entry string, withSecret bool) (SenderSpec, error) {
	var s SenderSpec
	spec, ref, hasRef := strings.Cut(entry, "=")
	domain, name, ok := strings.Cut(spec, "/")
	want := "<domain>/<name>"
	if withSecret {
		want += "=<env:NAME or file:/path>"
	}
	switch {
	case !ok:
		return s, fmt.Errorf("%q: expected %s", entry, want)
	case hasRef && !withSecret:
		return s, fmt.Errorf("%q: expected %s; secret references belong in the worker section", spec, want)
	case !hasRef && withSecret:
		return s, fmt.Errorf("%q: expected %s", entry, want)
	}
	if err := streams.ValidateDomain(domain); err != nil {
		return s, fmt.Errorf("%q: %w", spec, err)
	}
	if err := streams.ValidateDomain(name); err != nil {
		return s, fmt.Errorf("%q: sender name: %w", spec, err)
	}
	if withSecret {
		if err := worker.ValidateSecretRef(ref); err != nil {
			return s, fmt.Errorf("%q: %w", spec, err)
		}
	}
	return SenderSpec{Domain: domain, Name: name, Secret: ref}, nil
}

// validateSenders checks every entry of a senders list and that no sender
// of a domain repeats.
func validateSenders(field string, entries []string, withSecret bool) error {
	var errs []error
	seen := map[string]int{}
	for i, e := range entries {
		f := fmt.Sprintf("%s[%d]", field, i)
		s, err := ParseSender(e, withSecret)
		if err != nil {
			errs = append(errs, invalid(f, "%v", err))
			continue
		}
		k := s.Domain + "/" + s.Name
		if j, dup := seen[k]; dup {
			errs = append(errs, invalid(f, "%s repeats %s[%d]", k, field, j))
			continue
		}
		seen[k] = i
	}
	return errors.Join(errs...)
}

// SendersOf returns the sender names of domain in a processor's senders
// list, in order. Entries that do not parse are skipped (Validate reports them).
func (p *Processor) SendersOf(domain string) []string {
	var out []string
	for _, e := range p.Senders {
		if s, err := ParseSender(e, false); err == nil && s.Domain == domain {
			out = append(out, s.Name)
		}
	}
	return out
}

// SenderSecrets returns a worker's senders list as worker.Options.Senders
// wants it: secret references by domain and sender name.
func (w *Worker) SenderSecrets() map[string]map[string]string { return senderSecrets(w.Senders) }

// SenderSecrets returns run's senders list as worker.Options.Senders wants it.
func (r *Run) SenderSecrets() map[string]map[string]string { return senderSecrets(r.Senders) }

func senderSecrets(entries []string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, e := range entries {
		s, err := ParseSender(e, true)
		if err != nil {
			continue
		}
		if out[s.Domain] == nil {
			out[s.Domain] = map[string]string{}
		}
		out[s.Domain][s.Name] = s.Secret
	}
	return out
}
