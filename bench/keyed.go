package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// keyedFew is the key count of the keyed burn-down with few, busy keys.
const keyedFew = 100

// runKeyedPhase runs, in each repetition, the same burn-down of N atomic
// no-op batches unkeyed, keyed over keyedFew keys, and keyed over N keys
// (one batch per key), and reports each keyed drain beside the unkeyed
// drain of the same repetition.
func runKeyedPhase(cfg *config, res *results) error {
	for i := range cfg.reps {
		var base float64
		for _, keys := range []int{0, keyedFew, cfg.n} {
			quiet(cfg)
			m := startMeter()
			r, err := runBurnDown(cfg, burnOptions{spec: cfg.spec(), label: labelAtomic, functions: 1, n: cfg.n, units: 1, keys: keys})
			if err != nil {
				return fmt.Errorf("keyed burn-down over %d keys: %w", keys, err)
			}
			switch keys {
			case 0:
				base = r.drainRate
				logf("keyed phase %d/%d, unkeyed: submit %.0f batches/s, drain %.0f batches/s", i+1, cfg.reps, r.submitRate, r.drainRate)
				res.add("kd.none", "keyed phase: unkeyed drain (atomic, 1 noop)", "batches/s", r.drainRate, m)
				res.add("kd.none.submit", "keyed phase: unkeyed submit", "batches/s", r.submitRate, m)
				continue
			case keyedFew:
				logf("keyed phase %d/%d, %d keys: submit %.0f batches/s, drain %.0f batches/s (%.2f× unkeyed)", i+1, cfg.reps, keys, r.submitRate, r.drainRate, r.drainRate/base)
				res.add("kd.few", fmt.Sprintf("keyed phase: drain over %d keys", keys), "batches/s", r.drainRate, m)
				res.add("kd.few.submit", fmt.Sprintf("keyed phase: submit over %d keys", keys), "batches/s", r.submitRate, m)
			default:
				logf("keyed phase %d/%d, %d keys: submit %.0f batches/s, drain %.0f batches/s (%.2f× unkeyed)", i+1, cfg.reps, keys, r.submitRate, r.drainRate, r.drainRate/base)
				res.add("kd.many", fmt.Sprintf("keyed phase: drain over %d keys (one batch each)", keys), "batches/s", r.drainRate, m)
				res.add("kd.many.submit", fmt.Sprintf("keyed phase: submit over %d keys", keys), "batches/s", r.submitRate, m)
			}
		}
	}
	return nil
}

// submitKeyed is submitAll with batch i carrying key "k<i mod keys>".
func submitKeyed(ctx context.Context, nc *nats.Conn, label string, functions, n, inflight, keys int) (time.Duration, error) {
	return submitEach(ctx, nc, label, functions, n, inflight, nil, func(i int64) string {
		return "k" + strconv.FormatInt((i-1)%int64(keys), 10)
	})
}
