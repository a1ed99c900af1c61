package authz

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/senderlease"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// leased leases a sender of pay's pool among names to each batch, as a
// processor does, at the parts' clock.
func leased(t *testing.T, p *parts, kv jetstream.KeyValue, names []string, batches ...uint64) {
	t.Helper()
	for _, id := range batches {
		l := senderlease.Lease{Domain: "pay", Batch: id, Processor: "p1", Submitter: "alice"}
		if id%2 == 0 {
			l.Key = "k" + strconv.FormatUint(id, 10)
		}
		if _, err := senderlease.Acquire(p.ctx, kv, l, names, p.clock.Now()); err != nil {
			t.Fatalf("lease a sender to batch %d: %v", id, err)
		}
	}
}

// poolRevision is the revision of pay's pool as stored; 0 for none.
func poolRevision(t *testing.T, p *parts, kv jetstream.KeyValue) uint64 {
	t.Helper()
	e, err := kv.Get(p.ctx, "pay")
	if err != nil {
		return 0
	}
	return e.Revision()
}

// TestSenderPoolReleaseAndList: release frees the sender a batch holds,
// free since now, and leaves the others leased; repeated, or for a batch
// that holds none, or in a domain without a pool, it writes nothing. The
// listing shows each sender's state, holder and how long; a pool that
// does not decode is an error for both, and is left as it is; a bad
// domain is a 400.
func TestSenderPoolReleaseAndList(t *testing.T) {
	p := newParts(t)
	sp := p.senderPool(p.h)
	kv, err := p.admin.KeyValue(p.ctx, streams.BucketSenders)
	if err != nil {
		t.Fatal(err)
	}
	leased(t, p, kv, []string{"s1", "s2", "s3"}, 1, 2)
	p.clock.add(time.Minute)
	if err := sp.release(p.ctx, "pay", 1); err != nil {
		t.Fatal(err)
	}
	rev := poolRevision(t, p, kv)
	for _, tc := range []struct {
		name, domain string
		id           uint64
	}{
		{name: "repeated", domain: "pay", id: 1},
		{name: "a batch holding none", domain: "pay", id: 9},
		{name: "a domain without a pool", domain: "ship", id: 1},
	} {
		if err := sp.release(p.ctx, tc.domain, tc.id); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := poolRevision(t, p, kv); got != rev {
			t.Fatalf("%s: pool written (revision %d, was %d)", tc.name, got, rev)
		}
	}
	if _, err := kv.Get(p.ctx, "ship"); err == nil {
		t.Fatal("a release created ship's pool")
	}

	out, err := sp.list(p.ctx, DefaultOwner, &api.SendersRequest{Domain: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	leasedAt, freedAt := p.clock.Now().Add(-time.Minute), p.clock.Now()
	want := []api.SenderState{
		{Name: "s1", State: api.SenderFree, Since: freedAt},
		{Name: "s2", State: api.SenderLeased, Key: "k2", Batch: 2, Processor: "p1", Submitter: "alice", Since: leasedAt, For: pipeline.Duration(time.Minute)},
		{Name: "s3", State: api.SenderFree, Since: leasedAt, For: pipeline.Duration(time.Minute)},
	}
	got := out.(*api.SendersReply).Senders
	if len(got) != len(want) {
		t.Fatalf("senders %+v, want %+v", got, want)
	}
	for i := range want {
		if g, w := got[i], want[i]; g.Name != w.Name || g.State != w.State || g.Key != w.Key || g.Batch != w.Batch || g.Processor != w.Processor ||
			g.Submitter != w.Submitter || !g.Since.Equal(w.Since) || g.For != w.For {
			t.Fatalf("sender %d: %+v, want %+v", i, g, w)
		}
	}
	if out, err := sp.list(p.ctx, DefaultOwner, &api.SendersRequest{Domain: "ship"}); err != nil || len(out.(*api.SendersReply).Senders) != 0 {
		t.Fatalf("senders of a domain without a pool: %+v, %v; want none", out, err)
	}
	if _, err := sp.list(p.ctx, DefaultOwner, &api.SendersRequest{Domain: "pay ship"}); codeOf(err) != api.CodeBadRequest {
		t.Fatalf("senders of a bad domain: %v, want a 400", err)
	}

	if _, err := kv.Put(p.ctx, "ship", []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := sp.release(p.ctx, "ship", 1); err == nil {
		t.Fatal("a release in a pool that does not decode succeeded")
	}
	if _, err := sp.list(p.ctx, DefaultOwner, &api.SendersRequest{Domain: "ship"}); err == nil {
		t.Fatal("a listing of a pool that does not decode succeeded")
	}
	if e, err := kv.Get(p.ctx, "ship"); err != nil || string(e.Value()) != "garbage" {
		t.Fatalf("the pool that does not decode after a release: %v, %v; want it left as it was", e, err)
	}
}

// TestSenderPoolReleasesRaceAcrossReplicas: releases of different batches
// from two replicas at once, and a processor leasing meanwhile, each a
// compare-and-set on the one pool record: a release that loses its race
// reads the pool again and lands, so every released sender is free and
// the new lease stands.
func TestSenderPoolReleasesRaceAcrossReplicas(t *testing.T) {
	p := newParts(t)
	kv, err := p.admin.KeyValue(p.ctx, streams.BucketSenders)
	if err != nil {
		t.Fatal(err)
	}
	const n = 12
	names := make([]string, n+1)
	ids := make([]uint64, n)
	for i := range names {
		names[i] = "s" + strconv.Itoa(i)
	}
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	leased(t, p, kv, names, ids...)
	replicas := []*senderPool{p.senderPool(p.h), p.senderPool(p.replica(t))}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			if err := replicas[i%2].release(p.ctx, "pay", id); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Go(func() {
		if _, err := senderlease.Acquire(p.ctx, kv, senderlease.Lease{Domain: "pay", Batch: 100, Processor: "p2", Submitter: "bob"}, names, p.clock.Now()); err != nil {
			t.Error(err)
		}
	})
	wg.Wait()
	pool, err := senderlease.Load(p.ctx, kv, "pay")
	if err != nil {
		t.Fatal(err)
	}
	var holders []uint64
	for _, s := range pool.Senders {
		if !s.Free() {
			holders = append(holders, s.Batch)
		}
	}
	if len(pool.Senders) != n+1 || len(holders) != 1 || holders[0] != 100 {
		t.Fatalf("pool after the race: %+v; want %d senders, batch 100's the only lease", pool.Senders, n+1)
	}
}

// TestSenderPoolCheckInclusionConfirm: a confirmation of a function
// waiting for inclusion is checked against the progress as stored: it
// must be about the parked dispatch, while it is parked, and only an
// "included" may follow an inclusion; another function's passes
// unchecked, and so does one whose progress cannot be read (the
// processor decides).
func TestSenderPoolCheckInclusionConfirm(t *testing.T) {
	p := newParts(t)
	sp := p.senderPool(p.h)
	b := p.recordOnly(t, p.batch(func(b *pipeline.Batch) {
		b.Functions = []pipeline.Function{{Type: "noop", Inclusion: &pipeline.Inclusion{MaxWait: pipeline.Duration(time.Minute)}}, {Type: "noop"}}
	}))
	parked := func(index int, included bool) func(*streams.ProgressEntry) {
		return func(st *streams.ProgressEntry) {
			st.State = records.Parked
			st.Parked = &records.ParkedFunction{Index: index, Deadline: p.clock.Now().Add(time.Minute), Output: pipeline.Output{Ref: "tx1"}, Included: included}
		}
	}
	progress, err := p.admin.KeyValue(p.ctx, streams.BucketProgress)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		progress func(*streams.ProgressEntry) // nil: as it is
		garbage  bool
		req      api.ConfirmRequest
		wantCode int
	}{
		{name: "another function", req: api.ConfirmRequest{Index: 1, Content: "ok"}},
		{name: "not parked", req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx1"}, wantCode: api.CodeConflict},
		{name: "the parked dispatch", progress: parked(0, false), req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx1"}},
		{name: "its failure", req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmFailed, Ref: "tx1"}},
		{name: "another dispatch", req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx0"}, wantCode: api.CodeConflict},
		{name: "included, again", progress: parked(0, true), req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx1"}},
		{name: "included, then failed", req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmFailed, Ref: "tx1"}, wantCode: api.CodeConflict},
		{name: "parked at another function", progress: parked(1, false), req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx1"}, wantCode: api.CodeConflict},
		{name: "progress that does not decode", garbage: true, req: api.ConfirmRequest{Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx9"}},
	} {
		switch {
		case tc.garbage:
			if _, err := progress.Put(p.ctx, streams.ProgressKey("pay", b.ID), []byte("garbage")); err != nil {
				t.Fatal(err)
			}
		case tc.progress != nil:
			st := p.loadProgress(t, b)
			tc.progress(st)
			if err := p.progress.Save(p.ctx, "pay", st); err != nil {
				t.Fatal(err)
			}
		}
		tc.req.ID = b.ID
		if err := sp.checkInclusionConfirm(p.ctx, b, &tc.req); codeOf(err) != tc.wantCode {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.wantCode)
		}
	}
}
