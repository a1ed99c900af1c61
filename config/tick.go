package config

import (
	"errors"
	"flag"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/tickflow/tickflow/processor"
)

// Tick configures the tick command, which publishes the ticks that make
// processors take steps: every interval, on a cron schedule, or once.
// Exactly one of Every, Cron and Once is set. Its file section is tick:,
// its environment TICKFLOW_TICK_*.
type Tick struct {
	// NATS is the connection. Default: DefaultNATS with Name
	// "tickflow-tick".
	NATS NATS `yaml:"nats"`
	// Embedded, when enabled, starts a nats-server in this process from
	// nats.conf and connects to it in-process (still as the NATS user);
	// other commands attach to its listen address. Default: disabled,
	// connect to NATS.URL.
	Embedded Embedded `yaml:"embedded"`
	// Log is the logging of the command. Default: DefaultLog.
	Log Log `yaml:"log"`
	// Domains are the domains to tick, each one subject token. Required;
	// default none.
	Domains []string `yaml:"domains"`
	// Every ticks at this interval; at least 1ms. Default 0: unset.
	Every time.Duration `yaml:"every"`
	// Cron ticks on a six-field cron schedule with seconds first, e.g.
	// "*/10 * * * * *" for every ten seconds; see CronSchedule. Default "":
	// unset.
	Cron string `yaml:"cron"`
	// Once sends one tick per domain and exits. Default false.
	Once bool `yaml:"once"`
	// Steps is the step count each tick asks for; at least 1. Processors
	// cut it to their MaxSteps. Default processor.DefaultMaxSteps (256): as
	// many as a processor takes in one tick.
	Steps int `yaml:"steps"`
}

// DefaultTick returns the Tick defaults. Neither Domains nor a schedule is
// set, so the result does not validate until they are.
func DefaultTick() Tick {
	n := DefaultNATS()
	n.Name = "tickflow-tick"
	return Tick{NATS: n, Embedded: DefaultEmbedded(), Log: DefaultLog(), Steps: processor.DefaultMaxSteps}
}

// Section returns "tick".
func (*Tick) Section() string { return "tick" }

// CronSchedule parses Cron: six space-separated fields, seconds, minutes,
// hours, day of month, month, day of week, and no descriptors such as
// @hourly. It is the parser Validate uses, so the tick command should
// schedule with it.
func (t *Tick) CronSchedule() (cron.Schedule, error) {
	p := cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	return p.Parse(t.Cron)
}

// Validate reports every rule t breaks, joined, each a *FieldError matching
// ErrInvalid whose field starts "tick.".
func (t *Tick) Validate() error {
	errs := []error{
		under("nats", t.NATS.Validate()),
		under("embedded", t.Embedded.Validate()),
		under("log", t.Log.Validate()),
		validateDomains("domains", t.Domains, true),
	}
	var set []string
	if t.Every != 0 {
		set = append(set, "every")
		if t.Every < time.Millisecond {
			errs = append(errs, invalid("every", "must be at least 1ms (got %s)", t.Every))
		}
	}
	if t.Cron != "" {
		set = append(set, "cron")
		if _, err := t.CronSchedule(); err != nil {
			errs = append(errs, invalid("cron", "%q must be six fields, seconds first, e.g. \"*/10 * * * * *\": %v", t.Cron, err))
		}
	}
	if t.Once {
		set = append(set, "once")
	}
	switch len(set) {
	case 0:
		errs = append(errs, invalid("every", "one of every, cron or once must be set"))
	case 1:
	default:
		errs = append(errs, invalid(set[1], "must not be set together with %s: set exactly one of every, cron or once", set[0]))
	}
	if t.Steps < 1 {
		errs = append(errs, invalid("steps", "must be ≥ 1 (got %d)", t.Steps))
	}
	return under(t.Section(), errors.Join(errs...))
}

// Flags registers -domain, -every, -cron, -once, -steps and the NATS and
// log flags on fs, writing into t.
func (t *Tick) Flags(fs *flag.FlagSet) {
	domainsFlag(fs, &t.Domains, "`domains` to tick")
	fs.DurationVar(&t.Every, "every", t.Every, "tick at this `interval`")
	fs.StringVar(&t.Cron, "cron", t.Cron, "tick on this six-field cron `spec`, seconds first")
	fs.BoolVar(&t.Once, "once", t.Once, "tick once and exit")
	fs.IntVar(&t.Steps, "steps", t.Steps, "step `count` each tick asks for")
	t.NATS.Flags(fs)
	fs.BoolVar(&t.Embedded.Enabled, "embedded", t.Embedded.Enabled, "start a nats-server in this process (see -nats-conf, -data-dir, -listen) instead of connecting to -nats-url")
	t.Embedded.Flags(fs)
	t.Log.Flags(fs)
}
