package authz

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// Caller is what one caller may cost the others, on each authz replica:
// an entry of the table's callers: section. The entry "*" (Anyone) holds
// the defaults of every caller; a named caller's unset fields take them,
// and the fields "*" leaves unset take the built-in defaults.
type Caller struct {
	// MaxRequests bounds the caller's requests a replica holds at once,
	// served or waiting for a worker: one more is refused at once with 429.
	// Default: a quarter of the replica's workers (Options.Concurrency).
	MaxRequests *int `yaml:"max_requests,omitempty" json:"max_requests,omitempty"`
	// SendRate bounds the caller's sends per second on a replica, as a token
	// bucket refilled at this rate and holding SendBurst: a send beyond it
	// is refused with 429 before anything is read or written. 0: no bound.
	// Default: no bound.
	SendRate *float64 `yaml:"send_rate,omitempty" json:"send_rate,omitempty"`
	// SendBurst is how many sends the caller may make at once before
	// SendRate applies. Default: SendRate rounded up, and at least 1.
	SendBurst *int `yaml:"send_burst,omitempty" json:"send_burst,omitempty"`
}

// callerLimits are a caller's limits resolved: its entry, the defaults'
// and the built-in ones.
type callerLimits struct {
	maxRequests int
	sendRate    float64 // 0: no bound
	sendBurst   int
}

// limits resolves user's limits; defaultRequests is the built-in
// MaxRequests.
func (t *Table) limits(user string, defaultRequests int) callerLimits {
	own, all := t.Callers[user], t.Callers[Anyone]
	pick := func(get func(*Caller) bool) {
		if own != nil && get(own) {
			return
		}
		if all != nil {
			get(all)
		}
	}
	l := callerLimits{maxRequests: defaultRequests}
	pick(func(c *Caller) bool {
		if c.MaxRequests != nil {
			l.maxRequests = *c.MaxRequests
		}
		return c.MaxRequests != nil
	})
	pick(func(c *Caller) bool {
		if c.SendRate != nil {
			l.sendRate = *c.SendRate
		}
		return c.SendRate != nil
	})
	pick(func(c *Caller) bool {
		if c.SendBurst != nil {
			l.sendBurst = *c.SendBurst
		}
		return c.SendBurst != nil
	})
	if l.sendBurst == 0 && l.sendRate > 0 {
		l.sendBurst = max(int(math.Ceil(l.sendRate)), 1)
	}
	return l
}

// validateCallers checks the callers: section: each name one subject token
// (or "*"), each bound positive.
func (t *Table) validateCallers() error {
	names := make([]string, 0, len(t.Callers))
	for n := range t.Callers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := t.Callers[n]
		fail := func(field string, err error) error {
			return fmt.Errorf("%w: callers.%s.%s: %w", ErrTable, logging.Capped(n), field, err)
		}
		if n != Anyone {
			if err := pipeline.ValidateDomain(n); err != nil {
				return fmt.Errorf("%w: callers.%s: a caller is a user name, one subject token, or \"*\": %w", ErrTable, logging.Capped(n), err)
			}
		}
		if c == nil {
			continue
		}
		if c.MaxRequests != nil && *c.MaxRequests < 1 {
			return fail("max_requests", fmt.Errorf("must be at least 1 (got %d)", *c.MaxRequests))
		}
		if c.SendRate != nil && (*c.SendRate < 0 || math.IsNaN(*c.SendRate) || math.IsInf(*c.SendRate, 0)) {
			return fail("send_rate", fmt.Errorf("must be sends per second, 0 or more (0: no bound; got %v)", *c.SendRate))
		}
		if c.SendBurst != nil && *c.SendBurst < 1 {
			return fail("send_burst", fmt.Errorf("must be at least 1 (got %d)", *c.SendBurst))
		}
		if c.SendBurst != nil && (c.SendRate == nil || *c.SendRate == 0) && n != Anyone {
			if all := t.Callers[Anyone]; all == nil || all.SendRate == nil || *all.SendRate == 0 {
				return fail("send_burst", errors.New("applies only with a send_rate (here or under \"*\")"))
			}
		}
	}
	return nil
}
