package authz_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// TestCallbackLagOnlyForRecordedBatches: the callback-lag histogram counts
// the callbacks of recorded batches, by their domain; a callback for a
// batch authz never recorded, in the table's domain or in one it does not
// name, adds no observation and no series.
func TestCallbackLagOnlyForRecordedBatches(t *testing.T) {
	b := setup(t)
	b.stop()
	tel := telemetry.New(telemetry.Options{})
	b.runAuthz(t, authz.Options{Telemetry: tel})
	js := b.env.JS(t, "processor")
	for _, d := range []string{domain, "ghost"} {
		data, err := records.Encode(&records.Callback{BatchID: 1 << 40, Domain: d, Outcome: pipeline.ExecutedOutcome(1), Attempts: 1, At: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(b.ctx, streams.CallbackSubject(d), data); err != nil {
			t.Fatal(err)
		}
	}
	id := b.send(t, "alice", "jobs", noop())
	if rec := b.settled(t, id); rec.Status != pipeline.Executed {
		t.Fatalf("record %+v", rec)
	}
	admin := b.env.JS(t, "admin")
	testnats.Eventually(t, 5*time.Second, "every callback consumed", func() bool {
		c, err := admin.Consumer(b.ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(b.ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	got := lagCounts(t, tel)
	if len(got) != 1 || got[domain] != 1 {
		t.Fatalf("callback lag observations by domain %v, want %s: 1", got, domain)
	}
}

// lagCounts returns the callback-lag histogram's observations by domain.
func lagCounts(t *testing.T, tel *telemetry.Telemetry) map[string]uint64 {
	t.Helper()
	mfs, err := tel.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "tickflow_callback_apply_lag_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "domain" {
					out[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	return out
}
