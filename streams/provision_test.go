package streams_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/streams"
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
