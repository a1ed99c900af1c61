package ticker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/robfig/cron/v3"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/telemetry"
)

// Options configure a Ticker. Exactly one of Every, Schedule and Once is
// set; the zero value of every other field means its default.
type Options struct {
	// Domains are the domains ticked at each fire, each one subject token
	// (pipeline.ValidateDomain) and each at most once. Required.
	Domains []string
	// Every fires at this interval, the first fire one interval after Run
	// starts. Fires keep to the interval's grid rather than drifting by the
	// time publishing takes. Default 0: unset.
	Every time.Duration
	// Schedule fires at each time its Next returns, e.g. a robfig/cron/v3
	// spec from config.Tick.CronSchedule. Fires missed while the process was
	// busy or asleep are skipped, not made up. Default nil: unset.
	Schedule cron.Schedule
	// Once sends one tick per domain, flushes the connection and returns.
	// Default false.
	Once bool
	// Steps is the step count each tick asks for; processors cut it to
	// their MaxSteps. Default 0, which means processor.DefaultMaxSteps
	// (256): as many steps as a processor takes in one tick by default,
	// what `tick` asks too. A tick pacing a domain of the tick pace then
	// lets it drain up to 256 batches per fire; set 1 for a single step.
	Steps int
	// Logger receives a debug record per fire and a warning per failed
	// publish. Default: discard.
	Logger *slog.Logger
	// Now is the clock Schedule is read with. Default time.Now.
	Now func() time.Time
	// Telemetry counts the ticks published and tells readiness by the
	// connection. Default nil: none.
	Telemetry *telemetry.Telemetry
}

// Ticker publishes ticks to a fixed set of domains. It is safe for
// concurrent use; Run may be called again after it returns.
type Ticker struct {
	nc   *nats.Conn
	opts Options
	body []byte
	log  *slog.Logger
}

// New validates opts and returns a Ticker that publishes on nc. Bad options
// yield an error matching ErrInvalid that lists every problem found.
func New(nc *nats.Conn, opts Options) (*Ticker, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: the NATS connection is nil", ErrInvalid)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts.Domains = slices.Clone(opts.Domains)
	if opts.Steps == 0 {
		opts.Steps = processor.DefaultMaxSteps
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Telemetry.AddReadiness("ticker", nc, telemetry.Resources{})
	return &Ticker{nc: nc, opts: opts, body: body(opts.Steps), log: opts.Logger}, nil
}

func (o *Options) validate() error {
	var errs []error
	if len(o.Domains) == 0 {
		errs = append(errs, fmt.Errorf("%w: Domains: at least one domain is required", ErrInvalid))
	}
	for i, d := range o.Domains {
		if err := pipeline.ValidateDomain(d); err != nil {
			errs = append(errs, fmt.Errorf("%w: Domains[%d]: %w", ErrInvalid, i, err))
		} else if j := slices.Index(o.Domains[:i], d); j >= 0 {
			errs = append(errs, fmt.Errorf("%w: Domains[%d]: %q repeats Domains[%d]: each domain is ticked once per fire", ErrInvalid, i, d, j))
		}
	}
	var set []string
	if o.Every != 0 {
		set = append(set, "Every")
		if o.Every < 0 {
			errs = append(errs, fmt.Errorf("%w: Every: must be a positive interval (got %s)", ErrInvalid, o.Every))
		}
	}
	if o.Schedule != nil {
		set = append(set, "Schedule")
	}
	if o.Once {
		set = append(set, "Once")
	}
	if len(set) != 1 {
		got := "none"
		if len(set) > 1 {
			got = strings.Join(set, " and ")
		}
		errs = append(errs, fmt.Errorf("%w: set exactly one of Every, Schedule or Once (got %s)", ErrInvalid, got))
	}
	if o.Steps < 0 {
		errs = append(errs, fmt.Errorf("%w: Steps: must be ≥ 1, or 0 for the default %d (got %d)", ErrInvalid, processor.DefaultMaxSteps, o.Steps))
	}
	return errors.Join(errs...)
}

// Run ticks every domain at each fire until ctx is done, then returns nil.
// A publish that fails is logged and the next fire goes ahead: the
// connection reconnects by itself, and a processor loses nothing by a missed
// tick but time. Run returns an error only when the connection is closed for
// good or Schedule has no next fire time.
//
// With Once, Run publishes one tick per domain, flushes the connection so
// the ticks have reached the server (bounded by ctx, or by
// DefaultFlushTimeout when ctx has no deadline), and returns what failed.
func (t *Ticker) Run(ctx context.Context) error {
	switch {
	case t.opts.Once:
		return t.once(ctx)
	case t.opts.Every > 0:
		return t.every(ctx)
	default:
		return t.scheduled(ctx)
	}
}

func (t *Ticker) once(ctx context.Context) error {
	before := t.nc.LastError()
	var errs []error
	for _, d := range t.opts.Domains {
		if err := t.nc.Publish(streams.TickSubject(d), t.body); err != nil {
			errs = append(errs, fmt.Errorf("ticker: publish tick to %s: %w", streams.TickSubject(d), err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return flush(ctx, t.nc, before, t.opts.Domains)
}

func (t *Ticker) every(ctx context.Context) error {
	tk := time.NewTicker(t.opts.Every)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
			if err := t.fire(); err != nil {
				return err
			}
		}
	}
}

func (t *Ticker) scheduled(ctx context.Context) error {
	next := t.opts.Schedule.Next(t.opts.Now())
	if next.IsZero() {
		return fmt.Errorf("ticker: the schedule never fires after %s", t.opts.Now().Format(time.RFC3339))
	}
	timer := time.NewTimer(next.Sub(t.opts.Now()))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			if err := t.fire(); err != nil {
				return err
			}
			// Ask from the later of now and the fire just done: a timer that
			// woke a hair before the wall clock reached next must not fire
			// the same instant twice.
			now := t.opts.Now()
			from := now
			if from.Before(next) {
				from = next
			}
			if next = t.opts.Schedule.Next(from); next.IsZero() {
				return fmt.Errorf("ticker: the schedule never fires after %s", from.Format(time.RFC3339))
			}
			timer.Reset(next.Sub(now))
		}
	}
}

// fire publishes one tick to every domain. Only a closed connection is
// returned; other failures are logged.
func (t *Ticker) fire() error {
	for _, d := range t.opts.Domains {
		subj := streams.TickSubject(d)
		err := t.nc.Publish(subj, t.body)
		t.opts.Telemetry.TickPublished(d, err)
		switch {
		case errors.Is(err, nats.ErrConnectionClosed):
			return fmt.Errorf("ticker: publish tick to %s: %w", subj, err)
		case err != nil:
			t.log.Warn("tick not published", "domain", d, "subject", subj, "err", err)
		default:
			t.log.Debug("tick published", "domain", d, "subject", subj, "steps", t.opts.Steps)
		}
	}
	return nil
}
