package streams_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestProvisionIsIdempotent(t *testing.T) {
	env := testnats.Start(t, []string{"payments", "reports"})
	ctx := testnats.Context(t, 10*time.Second)
	js := env.JS(t, "admin")
	snapshot := func() map[string]any {
		out := map[string]any{}
		for _, cfg := range streams.Streams(env.Settings) {
			s, err := js.Stream(ctx, cfg.Name)
			if err != nil {
				t.Fatal(err)
			}
			out["stream/"+cfg.Name] = s.CachedInfo().Config
			out["created/"+cfg.Name] = s.CachedInfo().Created
		}
		for _, d := range []string{"payments", "reports"} {
			for _, c := range streams.DomainConsumers(env.Settings, d) {
				ci, err := js.Consumer(ctx, c.Stream, c.Config.Durable)
				if err != nil {
					t.Fatal(err)
				}
				out["consumer/"+c.Stream+"/"+c.Config.Durable] = ci.CachedInfo().Config
			}
		}
		for _, b := range streams.Buckets(env.Settings) {
			kv, err := js.KeyValue(ctx, b.Bucket)
			if err != nil {
				t.Fatal(err)
			}
			st, err := kv.Status(ctx)
			if err != nil {
				t.Fatal(err)
			}
			out["kv/"+b.Bucket] = st.History()
		}
		return out
	}
	before := snapshot()
	if err := streams.Provision(ctx, js, env.Settings, "payments", "reports"); err != nil {
		t.Fatal(err)
	}
	after := snapshot()
	for k, v := range before {
		if !equalJSON(t, v, after[k]) {
			t.Errorf("%s changed on second provision:\nbefore %+v\nafter  %+v", k, v, after[k])
		}
	}
}

func TestProvisionRejectsBadDomain(t *testing.T) {
	env := testnats.Start(t, nil)
	ctx := testnats.Context(t, 5*time.Second)
	for _, d := range []string{"a.b", "a*", "a>", "a b", ""} {
		if err := streams.Provision(ctx, env.JS(t, "admin"), env.Settings, d); err == nil {
			t.Errorf("domain %q: want error", d)
		}
	}
}

// TestProvisionUpgradesBucketsToExpire: the batches and progress buckets
// of a deployment provisioned before retention (plain KV buckets) take a
// per-message TTL after provisioning again, and say their retention.
func TestProvisionUpgradesBucketsToExpire(t *testing.T) {
	env := testnats.Start(t, nil)
	ctx := testnats.Context(t, 10*time.Second)
	js := env.JS(t, "admin")
	for _, b := range []string{streams.BucketBatches, streams.BucketProgress} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b, History: 1}); err != nil {
			t.Fatal(err)
		}
	}
	s := env.Settings
	s.FinishedMaxAge = 90 * time.Second
	if err := streams.Provision(ctx, js, s, "pay"); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{streams.BucketBatches, streams.BucketProgress} {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		r, err := streams.ReadRetention(ctx, kv)
		if err != nil {
			t.Fatal(err)
		}
		if r.Finished != 90*time.Second || r.DeadLetter != s.DLQMaxAge {
			t.Fatalf("bucket %s: retention %+v, want finished 90s, dead letters %s", b, r, s.DLQMaxAge)
		}
		if _, err := streams.PutKeyTTL(ctx, js, b, "k", []byte("v"), 0, time.Second); err != nil {
			t.Fatalf("bucket %s: write with a TTL: %v", b, err)
		}
		testnats.Eventually(t, 10*time.Second, "the key expired", func() bool {
			_, err := kv.Get(ctx, "k")
			return errors.Is(err, jetstream.ErrKeyNotFound)
		})
	}
	// The submitter index expires too: its entries live the finished age
	// and as long again for the batches to run (3m here).
	st, err := js.Stream(ctx, streams.StreamSubmitted)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.CachedInfo().Config.MaxAge; got != 3*time.Minute || got != s.SubmittedMaxAge() {
		t.Fatalf("stream %s: max age %s, want 3m", streams.StreamSubmitted, got)
	}
	// And again: nothing to change.
	if err := streams.Provision(ctx, js, s, "pay"); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionTTL: a record's time to live is what is left of its age,
// never under the server's minimum; none without retention.
func TestRetentionTTL(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := streams.Retention{Finished: time.Hour, DeadLetter: 24 * time.Hour}
	for _, tc := range []struct {
		name     string
		r        streams.Retention
		finished time.Time
		dl       bool
		want     time.Duration
	}{
		{"just finished", r, now, false, time.Hour},
		{"finished a while ago", r, now.Add(-20 * time.Minute), false, 40 * time.Minute},
		{"past its age", r, now.Add(-2 * time.Hour), false, time.Second},
		{"with a dead letter", r, now.Add(-2 * time.Hour), true, 22 * time.Hour},
		{"no finish time", r, time.Time{}, false, time.Hour},
		{"no retention", streams.Retention{}, now, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.r.TTL(tc.finished, now, tc.dl); got != tc.want {
				t.Fatalf("TTL = %s, want %s", got, tc.want)
			}
		})
	}
	if v := streams.TTLValue(1500 * time.Millisecond); v != "2s" {
		t.Fatalf("TTLValue(1.5s) = %q, want 2s", v)
	}
}
