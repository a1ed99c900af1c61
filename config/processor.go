package config

import (
	"errors"
	"flag"
	"time"

	"github.com/tickflow/tickflow/processor"
)

// Processor configures the processor command: the replicas that take a
// domain's queue tokens, run the batches' steps through the workers and
// report callbacks. Its file section is processor:, its environment
// TICKFLOW_PROCESSOR_*.
type Processor struct {
	// NATS is the connection. Default: DefaultNATS with Name
	// "tickflow-processor".
	NATS NATS `yaml:"nats"`
	// Embedded, when enabled, starts a nats-server in this process from
	// nats.conf and connects to it in-process (still as the NATS user);
	// other commands attach to its listen address. Default: disabled,
	// connect to NATS.URL.
	Embedded Embedded `yaml:"embedded"`
	// Log is the logging of the command. Default: DefaultLog.
	Log Log `yaml:"log"`
	// Streams sizes what the processor provisions when Provision is set,
	// including its consumers' AckWait and MaxAckPending. Default:
	// DefaultStreams.
	Streams Streams `yaml:"streams"`
	// Domains are the domains this processor serves, each one subject
	// token. Required; default none.
	Domains []string `yaml:"domains"`
	// Name identifies this replica in logs and in the records it writes.
	// Default "<hostname>-<pid>".
	Name string `yaml:"name"`
	// MaxSteps is the largest step count one tick may ask for; a tick
	// asking for more is cut to it. Default processor.DefaultMaxSteps (256).
	MaxSteps int `yaml:"max_steps"`
	// Concurrency is how many steps one tick runs at once, and how many
	// each tick of the ready pace asks for. Default
	// processor.DefaultConcurrency (128).
	Concurrency int `yaml:"concurrency"`
	// Pace says what makes this replica take steps: "ready" (the default)
	// takes ready work as it becomes ready, up to Concurrency steps at
	// once, waits on the server when the domain is idle, and serves ticks
	// too; "tick" takes steps only when ticked, so an outside clock (a cron
	// or interval ticker) sets the pace. Default processor.PaceReady.
	Pace string `yaml:"pace"`
	// IdleWait bounds one wait on the server of an idle replica in the
	// ready pace; the server ends it as soon as a token is ready. At least
	// 1ms. Default processor.DefaultIdleWait (1s).
	IdleWait time.Duration `yaml:"idle_wait"`
	// Throttle caps each domain served at this many steps per second,
	// across every replica given the same value (one budget per second in
	// the locks bucket), ticks included. Default 0: no cap.
	Throttle int `yaml:"throttle"`
	// WorkTimeout is the deadline of one request to a worker; at least 1ms.
	// Default processor.DefaultWorkTimeout (10s).
	WorkTimeout time.Duration `yaml:"work_timeout"`
	// MaxWait is how long a step may go without any worker attempting its
	// call (every worker busy, none answering, none serving the type)
	// before the function fails permanently; at least 1ms. Such a step
	// counts no attempt meanwhile (processor.Options.MaxWait). Default
	// processor.DefaultMaxWait (1h).
	MaxWait time.Duration `yaml:"max_wait"`
	// PoisonRetries is how many times a token that cannot be reconciled
	// with its batch's records is tried again, with a delay doubling from
	// 250ms to 1m, before the batch is finished failed with a dead letter;
	// at least 1 (processor.Options.PoisonRetries). Default
	// processor.DefaultPoisonRetries (12, about 5 minutes).
	PoisonRetries int `yaml:"poison_retries"`
	// Senders are the sender pools of the domains served, as
	// "<domain>/<name>" entries: a batch with a function that needs a
	// sender holds one of its domain's from its first step until it is
	// terminal. Names only; the workers hold the secrets. Default none.
	Senders []string `yaml:"senders"`
	// SenderShare is the most senders of a domain's pool that one
	// submitter's batches hold at once; a batch of a submitter at its share
	// waits as for a free sender (processor.Options.SenderShare). Default
	// 0: all but one of each pool, so no submitter holds every sender.
	SenderShare int `yaml:"sender_share"`
	// Provision creates this processor's consumers at start, which needs
	// admin rights on the account. Default false: the consumers must exist
	// already (authz provisions them for its domains).
	Provision bool `yaml:"provision"`
	// ProvisionOnly provisions (as Provision) and exits without serving:
	// a setup step before the processes start. Default false.
	ProvisionOnly bool `yaml:"provision_only"`
}

// DefaultProcessor returns the Processor defaults. Domains is empty, so the
// result does not validate until one is set.
func DefaultProcessor() Processor {
	n := DefaultNATS()
	n.Name = "tickflow-processor"
	return Processor{
		NATS:          n,
		Embedded:      DefaultEmbedded(),
		Log:           DefaultLog(),
		Streams:       DefaultStreams(),
		Name:          instanceName(), // not processor.DefaultName: each replica needs its own
		MaxSteps:      processor.DefaultMaxSteps,
		Concurrency:   processor.DefaultConcurrency,
		Pace:          string(processor.PaceReady),
		IdleWait:      processor.DefaultIdleWait,
		WorkTimeout:   processor.DefaultWorkTimeout,
		MaxWait:       processor.DefaultMaxWait,
		PoisonRetries: processor.DefaultPoisonRetries,
	}
}

// Section returns "processor".
func (*Processor) Section() string { return "processor" }

// Validate reports every rule p breaks, joined, each a *FieldError matching
// ErrInvalid whose field starts "processor.".
func (p *Processor) Validate() error {
	errs := []error{
		under("nats", p.NATS.Validate()),
		under("embedded", p.Embedded.Validate()),
		under("log", p.Log.Validate()),
		under("streams", p.Streams.Validate()),
		validateDomains("domains", p.Domains, true),
		validateSenders("senders", p.Senders, false),
	}
	if p.Name == "" {
		errs = append(errs, invalid("name", "must not be empty"))
	}
	if p.MaxSteps < 1 {
		errs = append(errs, invalid("max_steps", "must be ≥ 1 (got %d)", p.MaxSteps))
	}
	if p.Concurrency < 1 {
		errs = append(errs, invalid("concurrency", "must be ≥ 1 (got %d)", p.Concurrency))
	}
	if _, err := processor.ParsePace(p.Pace); err != nil {
		errs = append(errs, invalid("pace", "must be %q or %q (got %q)", processor.PaceReady, processor.PaceTick, p.Pace))
	}
	if p.IdleWait < time.Millisecond {
		errs = append(errs, invalid("idle_wait", "must be at least 1ms (got %s)", p.IdleWait))
	}
	if p.Throttle < 0 {
		errs = append(errs, invalid("throttle", "must be ≥ 0 steps per second, 0 for none (got %d)", p.Throttle))
	}
	if p.WorkTimeout < time.Millisecond {
		errs = append(errs, invalid("work_timeout", "must be at least 1ms (got %s)", p.WorkTimeout))
	}
	if p.MaxWait < time.Millisecond {
		errs = append(errs, invalid("max_wait", "must be at least 1ms (got %s)", p.MaxWait))
	}
	if p.PoisonRetries < 1 {
		errs = append(errs, invalid("poison_retries", "must be ≥ 1 (got %d)", p.PoisonRetries))
	}
	if p.SenderShare < 0 {
		errs = append(errs, invalid("sender_share", "must be ≥ 0, 0 meaning all but one sender of each pool (got %d)", p.SenderShare))
	}
	return under(p.Section(), errors.Join(errs...))
}

// Flags registers -domain, -name, -max-steps, -concurrency, -pace,
// -idle-wait, -throttle, -work-timeout, -max-wait, -poison-retries, -sender-share, -provision, -provision-only
// and the NATS and log flags on fs, writing into p.
func (p *Processor) Flags(fs *flag.FlagSet) {
	domainsFlag(fs, &p.Domains, "`domains` to serve")
	fs.StringVar(&p.Name, "name", p.Name, "`name` of this replica")
	fs.IntVar(&p.MaxSteps, "max-steps", p.MaxSteps, "largest step `count` one tick may ask for")
	fs.IntVar(&p.Concurrency, "concurrency", p.Concurrency, "`steps` one tick runs at once")
	fs.StringVar(&p.Pace, "pace", p.Pace, "what makes this replica take steps: `ready` (ready work at once, waiting on the server when idle; ticks too) or tick (ticks only)")
	fs.DurationVar(&p.IdleWait, "idle-wait", p.IdleWait, "with -pace ready: longest wait on the server of an idle replica (the server ends it when work is ready)")
	fs.IntVar(&p.Throttle, "throttle", p.Throttle, "at most this many `steps` per second per domain, shared by every replica given it; 0 for none")
	fs.DurationVar(&p.WorkTimeout, "work-timeout", p.WorkTimeout, "deadline of one worker request")
	fs.DurationVar(&p.MaxWait, "max-wait", p.MaxWait, "how long a step may go unattempted by any worker before its function fails")
	fs.IntVar(&p.PoisonRetries, "poison-retries", p.PoisonRetries, "`retries` of a token that does not match its batch's records before the batch is dead-lettered")
	fs.IntVar(&p.SenderShare, "sender-share", p.SenderShare, "most `senders` of a pool one submitter's batches hold at once (0: all but one)")
	fs.BoolVar(&p.Provision, "provision", p.Provision, "create streams and consumers at start (needs admin rights)")
	fs.BoolVar(&p.ProvisionOnly, "provision-only", p.ProvisionOnly, "create streams and consumers, then exit without serving (needs admin rights)")
	p.NATS.Flags(fs)
	fs.BoolVar(&p.Embedded.Enabled, "embedded", p.Embedded.Enabled, "start a nats-server in this process (see -nats-conf, -data-dir, -listen) instead of connecting to -nats-url")
	p.Embedded.Flags(fs)
	p.Log.Flags(fs)
}
