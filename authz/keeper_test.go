package authz_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestAuthzKeepsTheQueues: a running authz puts a keeper on each queue's
// stream. Batches run past it, and the domain's depth and queue listing
// count tokens only.
func TestAuthzKeepsTheQueues(t *testing.T) {
	b := setup(t)
	admin := b.env.JS(t, "admin")
	keepers := func(p pipeline.Priority) uint64 {
		t.Helper()
		st, err := admin.Stream(b.ctx, streams.QueueStream(p))
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(b.ctx, jetstream.WithSubjectFilter(streams.KeeperSubject(p)))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects[streams.KeeperSubject(p)]
	}
	testnats.Eventually(t, 10*time.Second, "a keeper on each queue", func() bool {
		return keepers(pipeline.High) == 1 && keepers(pipeline.Med) == 1
	})
	for _, label := range []string{"transfer", "jobs"} { // HIGH, MED
		id := b.send(t, "alice", label, noop())
		if rec := b.settled(t, id); rec.Status != pipeline.Executed {
			t.Fatalf("%s batch: %+v", label, rec)
		}
	}
	var rep api.DomainsReply
	if e := b.call(t, "owner", api.OpDomains, struct{}{}, &rep); e != nil {
		t.Fatal(e)
	}
	if len(rep.Domains) != 1 || rep.Domains[0].Depth[pipeline.High] != 0 || rep.Domains[0].Depth[pipeline.Med] != 0 {
		t.Fatalf("domains: %+v, want no depth", rep.Domains)
	}
	if q := b.queue(t, pipeline.High); len(q) != 0 {
		t.Fatalf("HIGH lists %v, want nothing", q)
	}
	if keepers(pipeline.High) == 0 {
		t.Fatal("no keeper left on HIGH")
	}
}
