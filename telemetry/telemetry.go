package telemetry

import (
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Options: New puts them in the fields left zero.
const (
	// DefaultCacheTTL is the default of Options.CacheTTL.
	DefaultCacheTTL = 5 * time.Second
	// DefaultFetchTimeout is the default of Options.FetchTimeout.
	DefaultFetchTimeout = 2 * time.Second
)

// Options configure a Telemetry. The zero value of each field means its default.
type Options struct {
	// TracerProvider makes the spans. Default nil: no spans, and no trace
	// context read from or written into messages.
	TracerProvider trace.TracerProvider
	// CacheTTL is how long the figures read from the server on a scrape
	// (queue depths, dead letters) and the result of the readiness checks
	// are reused: however often Prometheus or a prober asks, the server is
	// asked at most once per CacheTTL. Default DefaultCacheTTL (5s).
	CacheTTL time.Duration
	// FetchTimeout bounds one reading of those figures, and one round of
	// readiness checks. Default DefaultFetchTimeout (2s).
	FetchTimeout time.Duration
	// Logger receives the failures of the server's requests. Default: discard.
	Logger *slog.Logger
}

// Telemetry holds one process's metrics, readiness checks and tracer. A
// nil *Telemetry is valid and off: every method returns at once. It is
// safe for concurrent use.
type Telemetry struct {
	opts   Options
	log    *slog.Logger
	reg    *prometheus.Registry
	tracer trace.Tracer // nil: tracing off
	m      metrics

	steps, calls *inflight
	queues       *queueCollector

	readyMu sync.Mutex
	checks  []check
	ready   readyResult
}

// New returns a Telemetry with every tickflow metric registered in a
// registry of its own, beside the Go runtime's and the process's.
func New(opts Options) *Telemetry {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = DefaultCacheTTL
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	t := &Telemetry{opts: opts, log: opts.Logger.With("component", "telemetry"), reg: prometheus.NewRegistry()}
	if opts.TracerProvider != nil {
		t.tracer = opts.TracerProvider.Tracer(instrumentation)
	}
	t.m = newMetrics()
	t.steps = newInflight(descStepsInFlight, descOldestStep, "domain")
	t.calls = newInflight(descCallsInFlight, descOldestCall)
	t.queues = newQueueCollector(t)
	t.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	t.reg.MustRegister(t.m.collectors()...)
	t.reg.MustRegister(t.steps, t.calls, t.queues)
	return t
}

// instrumentation names the tracer, as OpenTelemetry asks.
const instrumentation = "github.com/tickflow/tickflow"

// Registry returns the registry every metric is in, to serve elsewhere or
// to add one's own metrics to; nil when t is nil.
func (t *Telemetry) Registry() *prometheus.Registry {
	if t == nil {
		return nil
	}
	return t.reg
}

// Tracing says whether t makes spans.
func (t *Telemetry) Tracing() bool { return t != nil && t.tracer != nil }
