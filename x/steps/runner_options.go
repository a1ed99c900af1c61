package steps

import (
	"log/slog"
	"time"
)

// Option configures a Runner. The zero configuration (no options) is the
// default for every setting.
type Option func(*Runner)

// WithLogger sets the logger the Runner reports failures, resumes and store
// errors to, with the attribute processor set to the processor's name.
// Default (or nil): logs are discarded.
func WithLogger(l *slog.Logger) Option {
	return func(r *Runner) {
		if l != nil {
			r.logger = l
		}
	}
}

// WithClock sets the function the Runner reads the time from, for
// timestamps and durations. Default (or nil): time.Now.
func WithClock(now func() time.Time) Option {
	return func(r *Runner) {
		if now != nil {
			r.now = now
		}
	}
}
