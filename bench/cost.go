package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	tfconfig "github.com/tickflow/tickflow/config"
)

// jsCounts is what the account's JetStream has done so far, per stream:
// messages stored (the stream's last sequence: every message it accepted,
// whether or not it still holds it) and messages its consumers delivered
// (each consumer's delivered sequence, redeliveries included).
type jsCounts struct {
	stored    map[string]uint64
	delivered map[string]uint64 // per stream, summed over its consumers, keyed "stream/consumer"
}

// readCounts reads jsCounts from the server's stream and consumer state,
// so no observer adds to what it counts.
func readCounts(ctx context.Context, e *env) (jsCounts, error) {
	c := jsCounts{stored: map[string]uint64{}, delivered: map[string]uint64{}}
	names := e.adminJS.StreamNames(ctx)
	for name := range names.Name() {
		s, err := e.adminJS.Stream(ctx, name)
		if err != nil {
			return c, err
		}
		c.stored[name] = s.CachedInfo().State.LastSeq
		cons := s.ListConsumers(ctx)
		for ci := range cons.Info() {
			c.delivered[name+"/"+ci.Name] = ci.Delivered.Consumer
		}
		if err := cons.Err(); err != nil {
			return c, err
		}
	}
	return c, names.Err()
}

// settledCounts reads the counts until two reads 50 ms apart agree (at
// most 5 s), so that what a phase set off is counted in that phase.
func settledCounts(e *env) (jsCounts, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	prev, err := readCounts(ctx, e)
	if err != nil {
		return prev, err
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		cur, err := readCounts(ctx, e)
		if err != nil {
			return cur, err
		}
		if maps.Equal(cur.stored, prev.stored) && maps.Equal(cur.delivered, prev.delivered) {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// costDelta is what one phase of a burn-down stored and delivered, per
// stream, and in all.
type costDelta struct {
	stored, delivered       map[string]uint64 // per stream
	storedAll, deliveredAll uint64
}

// delta is what happened between a and b. A consumer that appeared in
// between counts from zero; one that went away is not counted.
func delta(a, b jsCounts) costDelta {
	d := costDelta{stored: map[string]uint64{}, delivered: map[string]uint64{}}
	for k, v := range b.stored {
		if v > a.stored[k] {
			d.stored[k] = v - a.stored[k]
			d.storedAll += v - a.stored[k]
		}
	}
	for k, v := range b.delivered {
		if v > a.delivered[k] {
			stream, _, _ := strings.Cut(k, "/")
			d.delivered[stream] += v - a.delivered[k]
			d.deliveredAll += v - a.delivered[k]
		}
	}
	return d
}

// costResult is one repetition of the cost phase.
type costResult struct {
	burn          burnResult
	n             int
	submit, drain costDelta
	// many is the repetition's second burn-down, submitted with send_many;
	// nil with -send-many 0.
	many *costResult
	// k is the batches a send_many request carried (0: one Send a batch),
	// inflight the requests in flight.
	k, inflight int
}

// runCost runs the burn-down as shipped (the processors with their
// defaults in the ready pace beside the ticker `tickflow run` starts,
// cfg.processors replicas) over n atomic no-op batches, submitted one send
// a batch or, with k > 0, with send_many, k batches a request, and counts
// what its submit and its drain stored and delivered.
func runCost(cfg *config, n, k int, profile bool) (*costResult, error) {
	r, err := runBurnDown(cfg, burnOptions{spec: cfg.shippedSpec(cfg.processors), label: labelAtomic, functions: 1, n: n, units: 1,
		tickEvery: tfconfig.DefaultRun().TickEvery, tickerSteps: runTickerSteps, count: true, sendMany: k, profile: profile})
	if err != nil {
		return nil, err
	}
	c := &costResult{burn: r, n: n, submit: delta(r.counts[0], r.counts[1]), drain: delta(r.counts[1], r.counts[2]), k: k, inflight: cfg.inflight}
	if k > 0 {
		c.inflight = sendManyInflight(cfg.inflight, n, k)
	}
	return c, nil
}

// costRep runs repetition i of the cost phase: the burn-down as shipped
// submitted one Send a batch, then, with -send-many, a second one over as
// many batches submitted with send_many on a fresh server. Only the
// second one's submit is reported: its drain, the same as the first's, is
// run so that the burn-down's check (every callback applied, the queues
// empty) covers the batches send_many queued, and is only logged.
func costRep(cfg *config, res *results, i int) error {
	quiet(cfg)
	m := startMeter()
	c, err := runCost(cfg, cfg.n, 0, false)
	if err != nil {
		return fmt.Errorf("cost: %w", err)
	}
	// Each burn-down's figures carry the other processes' CPU during it.
	others, manyOthers := m.others(), 0.0
	if cfg.sendMany > 0 {
		quiet(cfg)
		mm := startMeter()
		if c.many, err = runCost(cfg, cfg.n, cfg.sendMany, i == 0 && cfg.profilePhase == "cost"); err != nil {
			return fmt.Errorf("cost, submitted with send_many: %w", err)
		}
		manyOthers = mm.others()
	}
	per := func(v uint64) float64 { return float64(v) / float64(c.n) }
	us := func(cpu float64) float64 { return cpu / float64(c.n) * 1e6 }
	logf("cost %d/%d (as shipped, %d processor(s)): submit %.0f batches/s, %.2f stored, %.2f delivered, %.0f µs CPU a batch; drain %.0f batches/s, %.2f stored, %.2f delivered, %.0f µs CPU a batch",
		i+1, cfg.reps, cfg.processors, c.burn.submitRate, per(c.submit.storedAll), per(c.submit.deliveredAll), us(c.burn.submitCPU),
		c.burn.drainRate, per(c.drain.storedAll), per(c.drain.deliveredAll), us(c.burn.drainCPU))
	logf("  drain, per batch: stored %s; delivered %s", perStream(c.drain.stored, c.n), perStream(c.drain.delivered, c.n))
	if mc := c.many; mc != nil {
		logf("  submitted with send_many (%d a request, %d requests in flight): %.0f batches/s, %.2f stored, %.2f delivered, %.0f µs CPU a batch; its drain (not reported) %.0f batches/s, %.0f µs CPU a batch",
			mc.k, mc.inflight, mc.burn.submitRate, per(mc.submit.storedAll), per(mc.submit.deliveredAll), us(mc.burn.submitCPU), mc.burn.drainRate, us(mc.burn.drainCPU))
	}
	p := cfg.processors
	res.addOthers("cost.submit", fmt.Sprintf("tickflow submit through authz, as shipped (N = %d)", c.n), "batches/s", c.burn.submitRate, others)
	if mc := c.many; mc != nil {
		res.addOthers("cost.manysubmit", fmt.Sprintf("tickflow submit with send_many through authz, %d batches a request, %d requests in flight (N = %d)", mc.k, mc.inflight, mc.n), "batches/s", mc.burn.submitRate, manyOthers)
	}
	res.addOthers("cost.drain", fmt.Sprintf("**drain as shipped**, %d processor(s) (N = %d)", p, c.n), "batches/s", c.burn.drainRate, others)
	res.addOthers("cost.submitstored", "submit: messages stored a batch (every stream and bucket)", "msgs/batch", per(c.submit.storedAll), others)
	res.addOthers("cost.submitdelivered", "submit: messages consumers delivered a batch", "msgs/batch", per(c.submit.deliveredAll), others)
	res.addOthers("cost.submitcpu", "submit: CPU a batch (the whole process: server, authz, submitter)", "µs/batch", us(c.burn.submitCPU), others)
	if mc := c.many; mc != nil {
		res.addOthers("cost.manysubmitstored", "submit with send_many: messages stored a batch (every stream and bucket)", "msgs/batch", per(mc.submit.storedAll), manyOthers)
		res.addOthers("cost.manysubmitcpu", "submit with send_many: CPU a batch (the whole process: server, authz, submitter)", "µs/batch", us(mc.burn.submitCPU), manyOthers)
	}
	res.addOthers("cost.drainstored", "**drain: messages stored a batch** (every stream and bucket)", "msgs/batch", per(c.drain.storedAll), others)
	res.addOthers("cost.draindelivered", "drain: messages consumers delivered a batch", "msgs/batch", per(c.drain.deliveredAll), others)
	res.addOthers("cost.draincpu", "**drain: CPU a batch** (the whole process: server, authz, processors, workers, ticker)", "µs/batch", us(c.burn.drainCPU), others)
	res.cost = c
	return nil
}

// perStream writes counts per stream as "NAME 1.00, …" per batch of n, the
// largest first.
func perStream(m map[string]uint64, n int) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(m[k])/float64(n)))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writeCost writes the last cost repetition's counts per stream, with the
// submit through send_many beside the single sends' when it ran.
func writeCost(sb *strings.Builder, c *costResult) {
	fmt.Fprintf(sb, "\nCost of a batch by stream (the cost phase's last repetition, %d batches as shipped; messages per batch, from each stream's last sequence and each consumer's delivered count):\n\n", c.n)
	cols := []map[string]uint64{c.submit.stored, c.submit.delivered, c.drain.stored, c.drain.delivered}
	all := []uint64{c.submit.storedAll, c.submit.deliveredAll, c.drain.storedAll, c.drain.deliveredAll}
	sb.WriteString("| stream | submit: stored | submit: delivered | drain: stored | drain: delivered |")
	if m := c.many; m != nil {
		fmt.Fprintf(sb, " submit with send_many (%d a request): stored | submit with send_many: delivered |", m.k)
		cols = append(cols, m.submit.stored, m.submit.delivered)
		all = append(all, m.submit.storedAll, m.submit.deliveredAll)
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(cols)) + "\n")
	names := map[string]bool{}
	for _, m := range cols {
		for k := range m {
			names[k] = true
		}
	}
	per := func(v uint64) string { return fmt.Sprintf("%.2f", float64(v)/float64(c.n)) }
	for _, k := range slices.Sorted(maps.Keys(names)) {
		fmt.Fprintf(sb, "| %s |", k)
		for _, m := range cols {
			fmt.Fprintf(sb, " %s |", per(m[k]))
		}
		sb.WriteString("\n")
	}
	sb.WriteString("| **all** |")
	for _, v := range all {
		fmt.Fprintf(sb, " **%s** |", per(v))
	}
	sb.WriteString("\n")
}
