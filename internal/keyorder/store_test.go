package keyorder_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// TestStore: appends keep their order and are idempotent, a removed
// id is not listed again, the head's time moves with the head, and a key
// whose last id leaves has no entry.
func TestStore(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 10*time.Second)
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s := keyorder.New(kv, func() time.Time { return now })
	for _, id := range []uint64{3, 1, 2, 1} {
		if _, _, err := s.Append(ctx, "pay", "k", id); err != nil {
			t.Fatal(err)
		}
	}
	q, err := s.Load(ctx, "pay", "k")
	if err != nil || !slices.Equal(q.IDs, []uint64{3, 1, 2}) || q.Head() != 3 || !q.HeadSince.Equal(now) {
		t.Fatalf("after appending 3, 1, 2, 1: %+v %v", q, err)
	}
	now = now.Add(time.Minute)
	if q, at, err := s.Remove(ctx, "pay", "k", 3); err != nil || at != 0 || q.Head() != 1 || !q.HeadSince.Equal(now) {
		t.Fatalf("remove the head: %+v at %d %v", q, at, err)
	}
	if q, at, err := s.Remove(ctx, "pay", "k", 3); err != nil || at != -1 || q.Head() != 1 {
		t.Fatalf("remove it again: %+v at %d %v", q, at, err)
	}
	if q, added, err := s.Append(ctx, "pay", "k", 3); err != nil || added || slices.Contains(q.IDs, 3) {
		t.Fatalf("a released id appended again: %+v added %v %v", q, added, err)
	}
	if _, _, err := s.Append(ctx, "pay", "other", 9); err != nil {
		t.Fatal(err)
	}
	qs, err := s.List(ctx, "pay")
	if err != nil || len(qs) != 2 {
		t.Fatalf("list: %+v %v", qs, err)
	}
	for _, id := range []uint64{2, 1} {
		if _, _, err := s.Remove(ctx, "pay", "k", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.Get(ctx, streams.KeyQueueKey("pay", "k")); err != jetstream.ErrKeyNotFound {
		t.Fatalf("an emptied key's entry: %v, want it deleted", err)
	}
	if q, added, err := s.Append(ctx, "pay", "k", 4); err != nil || !added || q.Head() != 4 {
		t.Fatalf("append after the entry was deleted: %+v %v %v", q, added, err)
	}
	all, err := s.ListAll(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("list all: %+v %v", all, err)
	}
}

// TestLeavesNothing: an emptied key's order leaves no entry and no
// marker behind once the marker expires, so keys chosen by callers do not
// grow the bucket; the key can be used again meanwhile.
func TestLeavesNothing(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 20*time.Second)
	js := env.JS(t, "admin")
	kv, err := js.KeyValue(ctx, streams.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	s := keyorder.New(kv, time.Now)
	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		if _, _, err := s.Append(ctx, "pay", key, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Remove(ctx, "pay", key, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// Used again right after its marker was written.
	if q, added, err := s.Append(ctx, "pay", "k0", 100); err != nil || !added || q.Head() != 100 {
		t.Fatalf("append over a marker: %+v %v %v", q, added, err)
	}
	if _, _, err := s.Remove(ctx, "pay", "k0", 100); err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+streams.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 15*time.Second, "the keys bucket empty", func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
}

// TestBound: AppendBy lists a submitter's batches on a key up to
// the bound asked for and refuses the next with ErrBound, leaving the
// order as it was; other submitters are counted apart, a listed id is
// listed once whatever the bound, and a removal makes room again.
func TestBound(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 10*time.Second)
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	s := keyorder.New(kv, nil)
	for _, j := range []struct {
		id uint64
		by string
	}{{1, "alice"}, {2, "alice"}, {3, "bob"}, {2, "alice"}} {
		if _, _, err := s.AppendBy(ctx, "pay", "k", j.id, j.by, 2); err != nil {
			t.Fatalf("append %d of %s: %v", j.id, j.by, err)
		}
	}
	q, added, err := s.AppendBy(ctx, "pay", "k", 4, "alice", 2)
	if !errors.Is(err, keyorder.ErrBound) || added || !slices.Equal(q.IDs, []uint64{1, 2, 3}) || q.CountBy("alice") != 2 {
		t.Fatalf("alice's third batch on a key bound at 2: %+v added %v, %v; want ErrBound and the order unchanged", q, added, err)
	}
	if q, _, err := s.Remove(ctx, "pay", "k", 1); err != nil || !slices.Equal(q.By, []string{"alice", "bob"}) {
		t.Fatalf("remove alice's head: %+v, %v", q, err)
	}
	q, added, err = s.AppendBy(ctx, "pay", "k", 4, "alice", 2)
	if err != nil || !added || q.SubmitterOf(2) != "alice" || q.CountBy("alice") != 2 {
		t.Fatalf("alice's batch once one of hers left: %+v added %v, %v", q, added, err)
	}
}

// TestJoinsUnderContention: 256 joins of one key at once, through
// two stores as two authz replicas would, all land, each exactly once.
func TestJoinsUnderContention(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	ctx := testnats.Context(t, 60*time.Second)
	var stores []*keyorder.Store
	for range 2 {
		kv, err := env.JS(t, "authz").KeyValue(ctx, streams.BucketKeys)
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, keyorder.New(kv, nil))
	}
	const joins = 256
	errs := make(chan error, joins)
	var wg sync.WaitGroup
	for i := range joins {
		wg.Go(func() {
			_, added, err := stores[i%2].AppendBy(ctx, "pay", "hot", uint64(i+1), "alice", 0)
			if err == nil && !added {
				err = fmt.Errorf("batch %d not added", i+1)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	failed := 0
	var first error
	for err := range errs {
		if err != nil {
			if failed++; first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d joins of one key failed, the first: %v", failed, joins, first)
	}
	q, err := stores[0].Load(ctx, "pay", "hot")
	if err != nil || len(q.IDs) != joins || q.CountBy("alice") != joins {
		t.Fatalf("the key's order after %d joins: %d listed, %v", joins, len(q.IDs), err)
	}
}
