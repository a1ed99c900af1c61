package config

import (
	"errors"
	"flag"
	"time"

	"github.com/tickflow/tickflow/processor"
)

// Run configures the run command, which runs authz, processors, workers
// and ticks in one process around an embedded nats-server, connected
// in-process, so it needs no NATS section or credentials. Its file section
// is run:, its environment TICKFLOW_RUN_*.
type Run struct {
	// Embedded is the nats-server run in the process. It must be enabled:
	// run has no other server to connect to. Default: DefaultEmbedded with
	// Enabled true.
	Embedded Embedded `yaml:"embedded"`
	// Log is the logging of the command. Default: DefaultLog.
	Log Log `yaml:"log"`
	// Streams sizes the streams and buckets provisioned in the embedded
	// server. Default: DefaultStreams.
	Streams Streams `yaml:"streams"`
	// Domains are the domains to serve and tick, each one subject token;
	// at least one. Default ["payments", "reports", "chain"].
	Domains []string `yaml:"domains"`
	// TickEvery is the interval at which every domain is ticked; at least
	// 1ms. Default 200ms.
	TickEvery time.Duration `yaml:"tick_every"`
	// Pace is the processors' pace (Processor.Pace): "ready" (the
	// default) takes ready work at once, "tick" only on ticks.
	Pace string `yaml:"pace"`
	// Throttle caps each domain's steps per second (Processor.Throttle).
	// Default 0: none.
	Throttle int `yaml:"throttle"`
	// Senders are the sender pools, as "<domain>/<name>=<secret
	// reference>" entries (the worker section's form). Default: the
	// example domain chain's sender-a and sender-b, whose secrets come from
	// TICKFLOW_SENDER_A and TICKFLOW_SENDER_B (the example handler runs
	// without them).
	Senders []string `yaml:"senders"`
	// Demo submits example batches so there is something to watch.
	// Default true.
	Demo bool `yaml:"demo"`
}

// DefaultRun returns the Run defaults, which validate.
func DefaultRun() Run {
	e := DefaultEmbedded()
	e.Enabled = true
	return Run{
		Embedded:  e,
		Log:       DefaultLog(),
		Streams:   DefaultStreams(),
		Domains:   []string{"payments", "reports", "chain"},
		Senders:   []string{"chain/sender-a=env:TICKFLOW_SENDER_A", "chain/sender-b=env:TICKFLOW_SENDER_B"},
		TickEvery: 200 * time.Millisecond,
		Pace:      string(processor.PaceReady),
		Demo:      true,
	}
}

// Section returns "run".
func (*Run) Section() string { return "run" }

// Validate reports every rule r breaks, joined, each a *FieldError matching
// ErrInvalid whose field starts "run.".
func (r *Run) Validate() error {
	errs := []error{
		under("embedded", r.Embedded.Validate()),
		under("log", r.Log.Validate()),
		under("streams", r.Streams.Validate()),
		validateDomains("domains", r.Domains, true),
		validateSenders("senders", r.Senders, true),
	}
	if !r.Embedded.Enabled {
		errs = append(errs, invalid("embedded.enabled", "must be true: run connects in-process to its embedded server"))
	}
	if _, err := processor.ParsePace(r.Pace); err != nil {
		errs = append(errs, invalid("pace", "must be %q or %q (got %q)", processor.PaceReady, processor.PaceTick, r.Pace))
	}
	if r.Throttle < 0 {
		errs = append(errs, invalid("throttle", "must be ≥ 0 steps per second, 0 for none (got %d)", r.Throttle))
	}
	if r.TickEvery < time.Millisecond {
		errs = append(errs, invalid("tick_every", "must be at least 1ms (got %s)", r.TickEvery))
	}
	return under(r.Section(), errors.Join(errs...))
}

// Flags registers -domain, -tick-every, -pace, -throttle, -demo, the embedded server's
// -nats-conf, -data-dir and -listen, and the log flags on fs, writing
// into r.
func (r *Run) Flags(fs *flag.FlagSet) {
	domainsFlag(fs, &r.Domains, "`domains` to serve and tick")
	fs.DurationVar(&r.TickEvery, "tick-every", r.TickEvery, "tick every domain at this `interval`")
	fs.StringVar(&r.Pace, "pace", r.Pace, "what makes the processors take steps: `ready` (ready work at once; ticks too) or tick (ticks only)")
	fs.IntVar(&r.Throttle, "throttle", r.Throttle, "at most this many `steps` per second per domain; 0 for none")
	fs.BoolVar(&r.Demo, "demo", r.Demo, "submit example batches")
	r.Embedded.Flags(fs)
	r.Log.Flags(fs)
}
