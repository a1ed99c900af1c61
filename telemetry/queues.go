package telemetry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// queueCollector reads the queue depths, the age of each queue's oldest
// token, the pause states and the dead letters of the watched
// domains from the server on a scrape: at most once per CacheTTL however
// often it is scraped (a concurrent scrape waits for the reading under
// way), each reading bounded by FetchTimeout. A figure the server did not
// give is left out of that scrape and counted in fetch_errors_total.
type queueCollector struct {
	t *Telemetry

	mu      sync.Mutex
	domains map[string]jetstream.JetStream
	// fronts holds, per domain, a connection that may read its queues'
	// messages (authz's; a processor may not), for their oldest tokens.
	fronts  map[string]jetstream.JetStream
	at      time.Time
	figures []prometheus.Metric
}

func newQueueCollector(t *Telemetry) *queueCollector {
	return &queueCollector{t: t, domains: map[string]jetstream.JetStream{}, fronts: map[string]jetstream.JetStream{}}
}

// WatchQueues reports the queue depths, pause state and dead letters of
// domain, read through js (whose user may read the
// domain's processor consumers, the domain states bucket and the DLQ
// stream's info, as nats.conf's processor may). The age of its queues'
// oldest tokens needs WatchQueueFronts. A domain watched twice
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

// WatchQueueFronts reports the age of the oldest token of each of
// domain's queues, read through js, whose user may read the queues'
// messages (as nats.conf's authz may). It reports the domain's other
// figures too, as WatchQueues does, unless another connection watches them
// already.
func (t *Telemetry) WatchQueueFronts(js jetstream.JetStream, domain string) {
	if t == nil {
		return
	}
	q := t.queues
	q.mu.Lock()
	if _, ok := q.domains[domain]; !ok {
		q.domains[domain] = js
	}
	if _, ok := q.fronts[domain]; !ok {
		q.fronts[domain] = js
	}
	q.at = time.Time{}
	q.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (q *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descQueueDepth
	ch <- descQueueUnacked
	ch <- descQueueOldest
	ch <- descPaused
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
			fjs, ok := q.fronts[d]
			if !ok {
				continue
			}
			age, err := oldestToken(ctx, fjs, prio, d)
			if err != nil {
				q.failed("queue_fronts", d, err)
				continue
			}
			out = append(out, prometheus.MustNewConstMetric(descQueueOldest, prometheus.GaugeValue, age.Seconds(), d, string(prio)))
		}
		paused, err := pausedDomain(ctx, js, d)
		if err != nil {
			q.failed("domain_states", d, err)
		} else {
			out = append(out, prometheus.MustNewConstMetric(descPaused, prometheus.GaugeValue, paused, d))
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

// oldestToken is the age of the first token of domain's queue of priority
// prio (the queues are work queues: a token is there until its batch moves
// on), 0 when there is none. The server keeps it whether or not a
// processor runs, so a paused domain's queue ages as it waits.
func oldestToken(ctx context.Context, js jetstream.JetStream, prio pipeline.Priority, domain string) (time.Duration, error) {
	st, err := js.Stream(ctx, streams.QueueStream(prio))
	if err != nil {
		return 0, err
	}
	m, err := st.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(streams.QueueFilter(prio, domain)))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return max(0, time.Since(m.Time)), nil
}

// pausedDomain is 1 when domain is paused, 0 otherwise.
func pausedDomain(ctx context.Context, js jetstream.JetStream, domain string) (float64, error) {
	kv, err := js.KeyValue(ctx, streams.BucketDomainStates)
	if err != nil {
		return 0, err
	}
	e, err := kv.Get(ctx, domain)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	st, err := records.DecodeDomainState(e.Value())
	if err != nil {
		return 0, err
	}
	if st.Paused {
		return 1, nil
	}
	return 0, nil
}

func (q *queueCollector) failed(what, domain string, err error) {
	q.t.m.fetchErrors.WithLabelValues(what).Inc()
	q.t.log.Warn("figures for the metrics not read", "what", what, "domain", domain, "err", strings.TrimSpace(err.Error()))
}
