package authz_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// shortRetention keeps a finished batch's records one second.
func shortRetention() testnats.Option {
	return testnats.WithSettings(func(s *streams.Settings) { s.FinishedMaxAge = time.Second })
}

func fail() api.CallSpec { return api.CallSpec{Type: handlers.TypeFail} }

// bucketMsgs is how many messages bucket's stream holds.
func (b *bundle) bucketMsgs(t *testing.T, bucket string) uint64 {
	t.Helper()
	st, err := b.env.JS(t, "admin").Stream(b.ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}

// TestFinishedBatchRecordsExpire: every record of a finished batch — its
// record, progress, submitter index and idempotency keys — is gone the
// finished age after it finished; then batch answers 404 saying so, list
// leaves it out, and a resend with its idempotency key is a new batch.
func TestFinishedBatchRecordsExpire(t *testing.T) {
	b := setup(t, shortRetention())
	alice := b.client(t, "alice")
	sent := answered(t, "send", func() (*api.SendReply, error) {
		return alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop(), noop()}, IdempotencyKey: "k-1"})
	})
	one := b.send(t, "alice", "transfer", noop()) // succeeds at its first step: no progress
	for _, id := range []uint64{sent.ID, one} {
		if rec := b.settled(t, id); rec.Status != pipeline.Executed || rec.FinishedAt.IsZero() {
			t.Fatalf("batch %d: %s finished at %v, want executed with a time", id, rec.Status, rec.FinishedAt)
		}
	}
	admin := b.env.JS(t, "admin")
	batches, err := admin.KeyValue(b.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	progress, err := admin.KeyValue(b.ctx, streams.BucketProgress)
	if err != nil {
		t.Fatal(err)
	}
	gone := func(kv jetstream.KeyValue, key string) bool {
		_, err := kv.Get(b.ctx, key)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	}
	testnats.Eventually(t, 20*time.Second, "every record of both batches expired", func() bool {
		return gone(batches, streams.BatchKey(sent.ID)) && gone(batches, streams.BatchKey(one)) &&
			gone(batches, streams.SubmitterKey("alice", sent.ID)) && gone(batches, streams.SubmitterKey("alice", one)) &&
			gone(progress, streams.ProgressKey(domain, sent.ID))
	})
	// Left: the idempotency key, kept as long as the id log's duplicate
	// window, and nothing else.
	testnats.Eventually(t, 10*time.Second, "both buckets empty but for the idempotency key", func() bool {
		return b.bucketMsgs(t, streams.BucketBatches) == 1 && b.bucketMsgs(t, streams.BucketProgress) == 0
	})
	if gone(batches, streams.IdempotencyKey("alice", "k-1")) {
		t.Fatal("the idempotency key went before the id log's duplicate window")
	}

	_, err = alice.Batch(b.ctx, api.IDRequest{ID: sent.ID})
	if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), fmt.Sprintf("no batch %d: it does not exist, or it finished and its record expired (records are kept 1s)", sent.ID)) {
		t.Fatalf("batch of an expired batch: %v, want 404 saying it may have expired", err)
	}
	_, err = alice.Batch(b.ctx, api.IDRequest{ID: 1 << 40})
	if !errors.Is(err, client.ErrNotFound) || strings.Contains(err.Error(), "expired") {
		t.Fatalf("batch of an id never handed out: %v, want a plain 404", err)
	}
	list := answered(t, "list", func() (*api.ListReply, error) { return alice.List(b.ctx, api.ListRequest{}) })
	if len(list.Items) != 0 {
		t.Fatalf("list after expiry: %+v, want nothing", list.Items)
	}
	// Within the id log's duplicate window the key is kept: its resend
	// is told the batch finished, not run again under the same id.
	_, err = alice.Send(b.ctx, api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop(), noop()}, IdempotencyKey: "k-1"})
	if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "finished and its record expired") {
		t.Fatalf("resend after expiry: %v, want 409 saying the batch finished", err)
	}
}

// TestRunningBatchIsKept: a batch that has not finished keeps its records
// however long it runs.
func TestRunningBatchIsKept(t *testing.T) {
	b := setup(t, shortRetention())
	// Waits for its confirmation after its first function.
	running := b.send(t, "bob", "confirmed", api.CallSpec{Type: handlers.TypeNoop, Expect: "x"})
	done := b.send(t, "alice", "transfer", noop())
	b.settled(t, done)
	testnats.Eventually(t, 20*time.Second, "the finished batch expired", func() bool {
		_, err := b.client(t, "alice").Batch(b.ctx, api.IDRequest{ID: done})
		return errors.Is(err, client.ErrNotFound)
	})
	rep := answered(t, "batch", func() (*api.BatchReply, error) {
		return b.client(t, "bob").Batch(b.ctx, api.IDRequest{ID: running})
	})
	if rep.Record.Status != pipeline.InProcess || rep.Progress == nil || rep.Progress.State != api.StateParked {
		t.Fatalf("running batch: %s, progress %+v; want in process, parked", rep.Record.Status, rep.Progress)
	}
	list := answered(t, "list", func() (*api.ListReply, error) { return b.client(t, "bob").List(b.ctx, api.ListRequest{}) })
	if len(list.Items) != 1 || list.Items[0].ID != running {
		t.Fatalf("bob's list: %+v, want the running batch", list.Items)
	}
}

// TestDeadLetterOutlivesFinishedAge: a batch with a dead letter keeps what
// its replay needs past the finished age: replayed then, and again, it
// gives one new batch, linked to its record.
func TestDeadLetterOutlivesFinishedAge(t *testing.T) {
	b := setup(t, shortRetention())
	failed := b.send(t, "alice", "jobs", noop(), fail())
	rec := b.settled(t, failed)
	if rec.DeadLetter == 0 {
		t.Fatalf("batch %d has no dead letter: %+v", failed, rec)
	}
	ok := b.send(t, "alice", "transfer", noop())
	b.settled(t, ok)
	owner := b.client(t, "owner")
	testnats.Eventually(t, 20*time.Second, "the batch without a dead letter expired", func() bool {
		_, err := owner.Batch(b.ctx, api.IDRequest{ID: ok})
		return errors.Is(err, client.ErrNotFound)
	})
	if rec := b.record(t, failed); rec.DeadLetter == 0 {
		t.Fatalf("the dead-lettered batch lost its record: %+v", rec)
	}
	rep := answered(t, "replay", func() (*api.ReplayReply, error) {
		return owner.Replay(b.ctx, api.ReplayRequest{Seq: rec.DeadLetter})
	})
	if len(rep.Replayed) != 1 || rep.Replayed[0].From != failed {
		t.Fatalf("replay: %+v", rep)
	}
	b.settled(t, rep.Replayed[0].AsNew)
	again := answered(t, "replay", func() (*api.ReplayReply, error) {
		return owner.Replay(b.ctx, api.ReplayRequest{Seq: rec.DeadLetter})
	})
	if again.Replayed[0].AsNew != rep.Replayed[0].AsNew {
		t.Fatalf("second replay: %+v, want the same batch as %+v", again, rep)
	}
	if rec := b.record(t, failed); rec.ReplayedAs != rep.Replayed[0].AsNew {
		t.Fatalf("original record: replayed as %d, want %d", rec.ReplayedAs, rep.Replayed[0].AsNew)
	}
}

// TestPurgeDeadLetters: the owner removes one dead letter, those older than
// a duration, and all of a domain's; no one else may.
func TestPurgeDeadLetters(t *testing.T) {
	var clock atomic.Pointer[time.Time]
	now := func() time.Time {
		if c := clock.Load(); c != nil {
			return *c
		}
		return time.Now()
	}
	b := setup(t)
	b.stop()
	b.runAuthz(t, authz.Options{Now: now})
	var seqs []uint64
	for range 4 {
		rec := b.settled(t, b.send(t, "alice", "jobs", fail()))
		seqs = append(seqs, rec.DeadLetter)
	}
	owner := b.client(t, "owner")
	purge := func(req api.PurgeRequest) uint64 {
		t.Helper()
		return answered(t, "purge", func() (*api.PurgeReply, error) { return owner.Purge(b.ctx, req) }).Purged
	}
	remaining := func() []uint64 {
		t.Helper()
		l := answered(t, "dlq", func() (*api.DLQReply, error) { return owner.DLQ(b.ctx, api.DLQRequest{Domain: domain}) })
		out := []uint64{}
		for _, it := range l.Items {
			out = append(out, it.Seq)
		}
		return out
	}

	if _, err := b.client(t, "alice").Purge(b.ctx, api.PurgeRequest{All: true}); !errors.Is(err, client.ErrForbidden) {
		t.Fatalf("alice's purge: %v, want forbidden", err)
	}
	if n := purge(api.PurgeRequest{Seq: seqs[3]}); n != 1 {
		t.Fatalf("purge of one: %d purged", n)
	}
	if _, err := owner.Purge(b.ctx, api.PurgeRequest{Seq: seqs[3]}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("purge of a purged one: %v, want not found", err)
	}
	if got := remaining(); !equal(got, seqs[:3]) {
		t.Fatalf("after purging %d: %v, want %v", seqs[3], got, seqs[:3])
	}

	// Older than an hour, an hour after the third was dead-lettered: the
	// two before it.
	m, err := b.env.JS(t, "admin").Stream(b.ctx, streams.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	third, err := m.GetMsg(b.ctx, seqs[2])
	if err != nil {
		t.Fatal(err)
	}
	at := third.Time.Add(time.Hour)
	clock.Store(&at)
	if n := purge(api.PurgeRequest{OlderThan: pipeline.Duration(time.Hour), Domain: domain}); n != 2 {
		t.Fatalf("purge older than 1h: %d purged, want 2", n)
	}
	if got := remaining(); !equal(got, seqs[2:3]) {
		t.Fatalf("after purging the older ones: %v, want %v", got, seqs[2:3])
	}
	if n := purge(api.PurgeRequest{All: true, Domain: "elsewhere"}); n != 0 {
		t.Fatalf("purge of another domain: %d purged, want 0", n)
	}
	if n := purge(api.PurgeRequest{All: true, Domain: domain}); n != 1 {
		t.Fatalf("purge of the domain: %d purged, want 1", n)
	}
	if got := remaining(); len(got) != 0 {
		t.Fatalf("after purging the domain: %v, want none", got)
	}
	for _, bad := range []api.PurgeRequest{{}, {Seq: 1, All: true}, {Seq: 1, Domain: domain}, {All: true, Domain: "a.b"}} {
		if _, err := owner.Purge(b.ctx, bad); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("purge %+v: %v, want invalid", bad, err)
		}
	}
}
