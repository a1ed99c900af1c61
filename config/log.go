package config

import (
	"errors"
	"flag"
	"io"
	"log/slog"

	"github.com/tickflow/tickflow/logging"
)

// Log says how a command logs to standard error.
type Log struct {
	// Format is "auto", "text" or "json". "auto" writes tint's coloured text
	// when standard error is a terminal and JSON otherwise. Default "auto".
	Format string `yaml:"format"`
	// Level is the least severe level written: "debug", "info", "warn" or
	// "error". Default "info".
	Level string `yaml:"level"`
}

// DefaultLog returns the Log defaults.
func DefaultLog() Log { return Log{Format: logging.FormatAuto, Level: "info"} }

// Validate reports an unknown format or level, as FieldErrors matching
// ErrInvalid (and logging.ErrFormat or logging.ErrLevel).
func (l Log) Validate() error {
	var errs []error
	if err := logging.ValidateFormat(l.Format); err != nil {
		errs = append(errs, &FieldError{Field: "format", Rule: ruleAfter(err, logging.ErrFormat), Err: err})
	}
	if _, err := logging.ParseLevel(l.Level); err != nil {
		errs = append(errs, &FieldError{Field: "level", Rule: ruleAfter(err, logging.ErrLevel), Err: err})
	}
	return errors.Join(errs...)
}

// ruleAfter strips sentinel's text from the front of err's message.
func ruleAfter(err, sentinel error) string {
	msg, p := err.Error(), sentinel.Error()+" "
	if len(msg) > len(p) && msg[:len(p)] == p {
		return msg[len(p):]
	}
	return msg
}

// Logger returns the logger l describes, writing to w (normally os.Stderr).
// It fails as logging.New does.
func (l Log) Logger(w io.Writer) (*slog.Logger, error) {
	return logging.New(w, l.Format, l.Level)
}

// Flags registers -log-format and -log-level on fs, writing into l.
func (l *Log) Flags(fs *flag.FlagSet) {
	fs.StringVar(&l.Format, "log-format", l.Format, "log `format`: auto, text or json")
	fs.StringVar(&l.Level, "log-level", l.Level, "least log `level` written: debug, info, warn or error")
}
