package processor_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestRemovedBatchLeasesNoSender: a batch that needs a sender is removed
// by authz (a cancel) while a processor holds its first token, which it
// steps without reading progress: leasing the sender, the processor finds
// the batch done, so its function never runs and it holds no sender; the
// batch's callback is the removal's.
func TestRemovedBatchLeasesNoSender(t *testing.T) {
	b, _ := setupSequencer(t)
	p := b.processor(t, processor.Options{Senders: []string{"s1"}})
	f := noop()
	f.Sender = true
	id := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{f}})
	// The removal's progress write; its token is still in the queue.
	kv, err := b.authz.KeyValue(b.ctx, streams.BucketProgress)
	if err != nil {
		t.Fatal(err)
	}
	store := streams.NewProgressStore(kv, nil)
	st, err := store.Load(b.ctx, domain, id)
	if err != nil {
		t.Fatal(err)
	}
	o := pipeline.RemovedOutcome(0)
	o.Reason = "cancelled by ops"
	st.State, st.Outcome, st.By = records.Done, &o, streams.AuthzService
	if err := store.Save(b.ctx, domain, st); err != nil {
		t.Fatal(err)
	}
	cb := b.outcome(t, p, id)
	if cb.Outcome.Status != pipeline.RemovedByOwner || cb.Outcome.Reason != o.Reason {
		t.Fatalf("callback %s, want the removal's", cb.Outcome)
	}
	if n := b.calls.get(key(id, 0)); n != 0 {
		t.Fatalf("the removed batch ran %d times", n)
	}
	if l := b.leases(t); len(l) != 0 {
		t.Fatalf("leases %v after the removed batch's step", l)
	}
	testnats.Eventually(t, 5*time.Second, "the token acknowledged", func() bool { return b.tokens(t, pipeline.Med) == 0 })
}
