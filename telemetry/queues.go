package telemetry

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// queueCollector reads the queue depths and dead letters of the watched
// domains from the server on a scrape: at most once per CacheTTL however
// often it is scraped (a concurrent scrape waits for the reading under
// way), each reading bounded by FetchTimeout. A figure the server did not
// give is left out of that scrape and counted in fetch_errors_total.
type queueCollector struct {
	t *Telemetry

	mu      sync.Mutex
	domains map[string]jetstream.JetStream
	at      time.Time
	figures []prometheus.Metric
}

func newQueueCollector(t *Telemetry) *queueCollector {
	return &queueCollector{t: t, domains: map[string]jetstream.JetStream{}}
}

// WatchQueues reports the queue depths and dead letters of domain, read
// through js (whose user may read the domain's processor consumers and the
// DLQ stream's info, as nats.conf's processor may). A domain watched twice
// is reported once, through the first js.
func (t *Telemetry) WatchQueues(js jetstream.JetStream, domain string) {
	if t == nil {
		return
	}
	q := t.queues
	q.mu.Lock()
	if _, ok := q.domains[domain]; !ok {
		q.domains[domain] = js
		q.at = time.Time{}
	}
	q.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descQueueDepth
	ch <- descQueueUnacked
	ch <- descDLQ
}

// Collect implements prometheus.Collector.
func (q *queueCollector) Collect(ch chan<- prometheus.Metric) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.domains) == 0 {
		return
	}
	if time.Since(q.at) >= q.t.opts.CacheTTL {
		ctx, cancel := context.WithTimeout(context.Background(), q.t.opts.FetchTimeout)
		q.figures = q.read(ctx)
		cancel()
		q.at = time.Now()
	}
	for _, m := range q.figures {
		ch <- m
	}
}

// read asks the server for every watched domain's figures.
func (q *queueCollector) read(ctx context.Context) []prometheus.Metric {
	var out []prometheus.Metric
	domains := make([]string, 0, len(q.domains))
	for d := range q.domains {
		domains = append(domains, d)
	}
	slices.Sort(domains)
	for _, d := range domains {
		js := q.domains[d]
		for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
			c, err := js.Consumer(ctx, streams.QueueStream(prio), streams.ProcessorConsumer(d))
			if err != nil {
				q.failed("queues", d, err)
				continue
			}
			info := c.CachedInfo()
			out = append(out,
				prometheus.MustNewConstMetric(descQueueDepth, prometheus.GaugeValue, float64(info.NumPending)+float64(info.NumAckPending), d, string(prio)),
				prometheus.MustNewConstMetric(descQueueUnacked, prometheus.GaugeValue, float64(info.NumAckPending), d, string(prio)))
		}
	}
	// One request for every domain's dead letters: the DLQ's count per
	// subject, dlq.<domain>.
	js := q.domains[domains[0]]
	s, err := js.Stream(ctx, streams.StreamDLQ)
	var info *jetstream.StreamInfo
	if err == nil {
		info, err = s.Info(ctx, jetstream.WithSubjectFilter(streams.DLQSubjects))
	}
	if err != nil {
		q.failed("dlq", "", err)
		return out
	}
	for _, d := range domains {
		n := info.State.Subjects[streams.DLQSubject(d)]
		out = append(out, prometheus.MustNewConstMetric(descDLQ, prometheus.GaugeValue, float64(n), d))
	}
	return out
}

func (q *queueCollector) failed(what, domain string, err error) {
	q.t.m.fetchErrors.WithLabelValues(what).Inc()
	q.t.log.Warn("figures for the metrics not read", "what", what, "domain", domain, "err", strings.TrimSpace(err.Error()))
}
