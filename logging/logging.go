// Package logging builds the *slog.Logger every tickflow command passes down:
// tint's coloured text for people at a terminal, JSON for machines.
//
// Attribute keys are the callers' business; by house style they are
// snake_case (batch_id, domain, step).
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"golang.org/x/term"
)

// Formats accepted by New.
const (
	// FormatAuto writes tint text when the writer is a terminal and JSON
	// otherwise.
	FormatAuto = "auto"
	// FormatText always writes tint text, coloured only on a terminal.
	FormatText = "text"
	// FormatJSON always writes one JSON object per line.
	FormatJSON = "json"
)

// New returns a logger writing to w in format ("auto", "text" or "json";
// "" means "auto") at level and above ("debug", "info", "warn" or "error",
// any case; "" means "info").
//
// "auto" picks tint text when w is an *os.File on a terminal and JSON
// otherwise, so the same binary reads well by hand and under a supervisor.
// Text is coloured only on a terminal. Durations are written as text
// ("200ms") in both formats. It returns an error matching
// ErrFormat or ErrLevel for anything else. The logger is safe for concurrent
// use; w is written under the handler's lock.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	if err := ValidateFormat(format); err != nil {
		return nil, err
	}
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	tty := isTerminal(w)
	switch strings.ToLower(format) {
	case FormatText:
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationString})), nil
	default: // auto
		if !tty {
			return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: durationString})), nil
		}
	}
	return slog.New(tint.NewTextHandler(w, &tint.Options{
		Level:      lvl,
		TimeFormat: time.TimeOnly + ".000",
		NoColor:    !tty,
	})), nil
}

// durationString renders a time.Duration as text ("200ms"), as tint does:
// slog's JSON handler would write nanoseconds (200000000), which a person
// reading the log has to count digits of.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// ValidateFormat reports, matching ErrFormat, a format New does not know.
// Case is ignored and "" means "auto".
func ValidateFormat(format string) error {
	switch strings.ToLower(format) {
	case "", FormatAuto, FormatText, FormatJSON:
		return nil
	}
	return fmt.Errorf("%w %q: must be %q, %q or %q", ErrFormat, format, FormatAuto, FormatText, FormatJSON)
}

// ParseLevel returns the slog level named by level: "debug", "info", "warn"
// or "error", any case; "" is "info". Anything else is an error matching
// ErrLevel. Offsets such as slog's "info+2" are refused on purpose: a config
// file should say one of four words.
func ParseLevel(level string) (slog.Level, error) {
	switch strings.ToLower(level) {
	case "debug":
		return slog.LevelDebug, nil
	case "", "info":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%w %q: must be \"debug\", \"info\", \"warn\" or \"error\"", ErrLevel, level)
}

// isTerminal reports whether w is a file open on a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
