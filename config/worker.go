package config

import (
	"errors"
	"flag"
	"time"

	"github.com/tickflow/tickflow/worker"
)

// Worker configures the worker command: the service that executes
// functions for the processors. Its file section is worker:, its
// environment TICKFLOW_WORKER_*.
type Worker struct {
	// NATS is the connection. Default: DefaultNATS with Name
	// "tickflow-worker".
	NATS NATS `yaml:"nats"`
	// Embedded, when enabled, starts a nats-server in this process from
	// nats.conf and connects to it in-process (still as the NATS user);
	// other commands attach to its listen address. Default: disabled,
	// connect to NATS.URL.
	Embedded Embedded `yaml:"embedded"`
	// Log is the logging of the command. Default: DefaultLog.
	Log Log `yaml:"log"`
	// Name identifies this replica in logs and in the records it writes.
	// Default "<hostname>-<pid>".
	Name string `yaml:"name"`
	// Concurrency is how many handler calls run at once. Default
	// worker.DefaultConcurrency (64).
	Concurrency int `yaml:"concurrency"`
	// RecordWindow is how long past a call's deadline the worker keeps
	// trying to write its completion record when the server does not take
	// it, and so how long past the deadline its claim on the call holds;
	// at least 1ms (worker.Options.RecordWindow). Default
	// worker.DefaultRecordWindow (15s).
	RecordWindow time.Duration `yaml:"record_window"`
	// Senders are the secret references of the senders this worker
	// dispatches with, as "<domain>/<name>=<reference>" entries, the
	// reference "env:NAME" or "file:/path" (worker.Options.Senders).
	// Default none.
	Senders []string `yaml:"senders"`
	// Examples registers the example handlers (the demo's ledger,
	// http.post, flaky, fail, noop and the underwriting step pipeline).
	// Default false: a worker serves what its binary registers, and the
	// examples are opt-in.
	Examples bool `yaml:"examples"`
}

// DefaultWorker returns the Worker defaults, which validate.
func DefaultWorker() Worker {
	n := DefaultNATS()
	n.Name = "tickflow-worker"
	return Worker{
		NATS:         n,
		Embedded:     DefaultEmbedded(),
		Log:          DefaultLog(),
		Name:         instanceName(), // not worker.DefaultName: each replica needs its own
		Concurrency:  worker.DefaultConcurrency,
		RecordWindow: worker.DefaultRecordWindow,
	}
}

// Section returns "worker".
func (*Worker) Section() string { return "worker" }

// Validate reports every rule w breaks, joined, each a *FieldError matching
// ErrInvalid whose field starts "worker.".
func (w *Worker) Validate() error {
	errs := []error{
		under("nats", w.NATS.Validate()),
		under("embedded", w.Embedded.Validate()),
		under("log", w.Log.Validate()),
		validateSenders("senders", w.Senders, true),
	}
	if w.Name == "" {
		errs = append(errs, invalid("name", "must not be empty"))
	}
	if w.Concurrency < 1 {
		errs = append(errs, invalid("concurrency", "must be ≥ 1 (got %d)", w.Concurrency))
	}
	if w.RecordWindow < time.Millisecond {
		errs = append(errs, invalid("record_window", "must be at least 1ms (got %s)", w.RecordWindow))
	}
	return under(w.Section(), errors.Join(errs...))
}

// Flags registers -name, -concurrency, -record-window, -examples and the
// NATS and log flags on fs, writing into w.
func (w *Worker) Flags(fs *flag.FlagSet) {
	fs.StringVar(&w.Name, "name", w.Name, "`name` of this replica")
	fs.IntVar(&w.Concurrency, "concurrency", w.Concurrency, "handler `calls` at once")
	fs.DurationVar(&w.RecordWindow, "record-window", w.RecordWindow, "how long past a call's deadline to keep trying to write its completion record")
	fs.BoolVar(&w.Examples, "examples", w.Examples, "register the example handlers")
	w.NATS.Flags(fs)
	fs.BoolVar(&w.Embedded.Enabled, "embedded", w.Embedded.Enabled, "start a nats-server in this process (see -nats-conf, -data-dir, -listen) instead of connecting to -nats-url")
	w.Embedded.Flags(fs)
	w.Log.Flags(fs)
}
