package telemetry

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// inflight counts what runs now, by key (a domain, or "" without a label),
// and knows when the oldest of it started. A key seen once stays reported,
// at zero when nothing runs.
type inflight struct {
	count, oldest *prometheus.Desc
	labeled       bool

	mu      sync.Mutex
	next    uint64
	running map[string]map[uint64]time.Time
}

func newInflight(count, oldest *prometheus.Desc, label ...string) *inflight {
	return &inflight{count: count, oldest: oldest, labeled: len(label) > 0, running: map[string]map[uint64]time.Time{}}
}

// watch reports key from now on, even before anything runs under it.
func (f *inflight) watch(key string) {
	f.mu.Lock()
	if f.running[key] == nil {
		f.running[key] = map[uint64]time.Time{}
	}
	f.mu.Unlock()
}

// start records that something started under key at now, and returns its
// ticket for done.
func (f *inflight) start(key string, now time.Time) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	m := f.running[key]
	if m == nil {
		m = map[uint64]time.Time{}
		f.running[key] = m
	}
	m[f.next] = now
	return f.next
}

func (f *inflight) done(key string, ticket uint64) {
	f.mu.Lock()
	delete(f.running[key], ticket)
	f.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (f *inflight) Describe(ch chan<- *prometheus.Desc) {
	ch <- f.count
	ch <- f.oldest
}

// Collect implements prometheus.Collector.
func (f *inflight) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, m := range f.running {
		var oldest time.Duration
		for _, at := range m {
			oldest = max(oldest, now.Sub(at))
		}
		var labels []string
		if f.labeled {
			labels = []string{key}
		}
		ch <- prometheus.MustNewConstMetric(f.count, prometheus.GaugeValue, float64(len(m)), labels...)
		ch <- prometheus.MustNewConstMetric(f.oldest, prometheus.GaugeValue, oldest.Seconds(), labels...)
	}
}
