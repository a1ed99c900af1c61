package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// namespace prefixes every tickflow metric.
const namespace = "tickflow"

// Buckets of the histograms, in seconds.
var (
	// latencyBuckets cover a step or a handler: 0.5ms to about 16s.
	latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 16)
	// lagBuckets cover a callback's wait for authz: 1ms to about 65s.
	lagBuckets = prometheus.ExponentialBuckets(0.001, 2, 17)
	// outcomeBuckets cover a batch from its send to its outcome: 10ms to
	// about 12h, by fourfold steps.
	outcomeBuckets = prometheus.ExponentialBuckets(0.01, 4, 12)
)

// metrics are the metrics whose values the components' hooks set; the ones
// read on a scrape are inflight's and queueCollector's.
type metrics struct {
	submitted   *prometheus.CounterVec
	finished    *prometheus.CounterVec
	callbackLag *prometheus.HistogramVec
	stepSeconds *prometheus.HistogramVec
	retries     *prometheus.CounterVec
	fallbacks   *prometheus.CounterVec
	handler     *prometheus.HistogramVec
	workerBusy  prometheus.Counter
	ticks       *prometheus.CounterVec
	fetchErrors *prometheus.CounterVec
	throttle    *prometheus.GaugeVec
	throttled   *prometheus.CounterVec
	outcome     *prometheus.HistogramVec
	waiting     *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "batches_submitted_total",
			Help: "Batches authz accepted and queued (a repeated submission with the same idempotency key counts once).",
		}, []string{"domain", "label", "priority"}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "batches_finished_total",
			Help: "Batches whose terminal callback authz recorded, by outcome status.",
		}, []string{"domain", "label", "outcome"}),
		callbackLag: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "callback_apply_lag_seconds",
			Help:    "Time from a callback's publication by a processor to its application by authz.",
			Buckets: lagBuckets,
		}, []string{"domain"}),
		stepSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "processor", Name: "step_seconds",
			Help:    "Duration of one step of a batch, by what the step did (its action).",
			Buckets: latencyBuckets,
		}, []string{"domain", "priority", "action"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "processor", Name: "retries_total",
			Help: "Steps whose function (or atomic unit) failed and waits for a retry.",
		}, []string{"domain"}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "processor", Name: "fallbacks_total",
			Help: "Failed functions whose fallback handled the failure.",
		}, []string{"domain"}),
		handler: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: "worker", Name: "handler_seconds",
			Help:    "Duration of one handler call, by function type, kind (function or fallback) and result (ok or error).",
			Buckets: latencyBuckets,
		}, []string{"type", "kind", "result"}),
		workerBusy: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "worker", Name: "busy_total",
			Help: "Requests a worker answered busy: every handler slot stayed taken (the processor asks again later).",
		}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "ticker", Name: "ticks_total",
			Help: "Ticks published, by result (published or failed).",
		}, []string{"domain", "result"}),
		throttle: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Subsystem: "processor", Name: "throttle_steps_per_second",
			Help: "The steps per second a processor allows its domain, shared by every replica (0: no throttle).",
		}, []string{"domain"}),
		throttled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "processor", Name: "throttled_total",
			Help: "Ticks (a replica's own or from outside) cut short because the domain's steps of the second were spent.",
		}, []string{"domain"}),
		outcome: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "batch_outcome_seconds",
			Help:    "Time from a batch's send (its acceptance by authz) to authz recording its terminal outcome, by outcome status.",
			Buckets: outcomeBuckets,
		}, []string{"domain", "outcome"}),
		waiting: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "processor", Name: "waits_for_worker_total",
			Help: "Batches that began to wait for a worker to attempt their call (no worker serves the type, or none attempted it for long), by function type; the reason is in the batch's progress.",
		}, []string{"domain", "type"}),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Subsystem: "telemetry", Name: "fetch_errors_total",
			Help: "Failed requests for the figures read from the server on a scrape (what: queues, dlq).",
		}, []string{"what"}),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.submitted, m.finished, m.callbackLag, m.stepSeconds, m.retries,
		m.fallbacks, m.handler, m.workerBusy, m.ticks, m.fetchErrors, m.throttle, m.throttled, m.outcome, m.waiting}
}

// Descriptions of the metrics read on a scrape.
var (
	descStepsInFlight = prometheus.NewDesc(namespace+"_processor_steps_in_flight",
		"Steps running now.", []string{"domain"}, nil)
	descOldestStep = prometheus.NewDesc(namespace+"_processor_oldest_step_seconds",
		"Age of the oldest step running now (0 when none runs).", []string{"domain"}, nil)
	descCallsInFlight = prometheus.NewDesc(namespace+"_worker_calls_in_flight",
		"Work requests a worker is running now.", nil, nil)
	descOldestCall = prometheus.NewDesc(namespace+"_worker_oldest_call_seconds",
		"Age of the oldest work request running now (0 when none runs).", nil, nil)
	descQueueDepth = prometheus.NewDesc(namespace+"_queue_depth",
		"Tokens in a domain's queue of a priority: batches waiting for a step, running one, or waiting for a retry or a confirmation.",
		[]string{"domain", "priority"}, nil)
	descQueueUnacked = prometheus.NewDesc(namespace+"_queue_unacked",
		"The part of queue_depth delivered to a processor and not acknowledged: steps running, retries and confirmations waited for.",
		[]string{"domain", "priority"}, nil)
	descQueueOldest = prometheus.NewDesc(namespace+"_queue_oldest_seconds",
		"Age of the oldest token in a domain's queue of a priority (0 when empty): how long its front batch has waited, for its turn, a worker, a retry or a confirmation; it grows while the domain is paused.",
		[]string{"domain", "priority"}, nil)
	descPaused = prometheus.NewDesc(namespace+"_domain_paused",
		"1 while a domain is paused, 0 otherwise.", []string{"domain"}, nil)
	descDLQ = prometheus.NewDesc(namespace+"_dlq_messages",
		"Dead letters of a domain in the DLQ stream.", []string{"domain"}, nil)
)
