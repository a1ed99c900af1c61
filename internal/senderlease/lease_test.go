package senderlease_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/senderlease"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// Many batches race for a pool of two: two win, each holds one sender, a
// winner asking again gets its own, and releases free exactly theirs.
func TestSenderLeases(t *testing.T) {
	env := testnats.Start(t, []string{"chain"})
	ctx := testnats.Context(t, 20*time.Second)
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketSenders)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b"}
	now := time.Now()
	won := raceForSenders(t, func(id uint64) (string, error) {
		return senderlease.Acquire(ctx, kv, senderlease.Lease{Domain: "chain", Batch: id, Key: "k"}, names, now)
	}, senderlease.ErrNoSender)
	if len(won) != 2 {
		t.Fatalf("winners %v, want 2", won)
	}
	held := map[string]uint64{}
	for id, name := range won {
		if other, dup := held[name]; dup {
			t.Fatalf("sender %s leased to batches %d and %d", name, other, id)
		}
		held[name] = id
		again, err := senderlease.Acquire(ctx, kv, senderlease.Lease{Domain: "chain", Batch: id}, names, now)
		if err != nil || again != name {
			t.Fatalf("batch %d asking again: %q, %v; want its %q", id, again, err, name)
		}
	}
	var first uint64
	for id := range won {
		first = id
		break
	}
	for range 2 { // idempotent
		if _, err := senderlease.Release(ctx, kv, "chain", first, now); err != nil {
			t.Fatal(err)
		}
	}
	if name, err := senderlease.Acquire(ctx, kv, senderlease.Lease{Domain: "chain", Batch: 99}, names, now); err != nil || name != won[first] {
		t.Fatalf("after the release: %q, %v; want %q", name, err, won[first])
	}
	pool, err := senderlease.Load(ctx, kv, "chain")
	if err != nil || len(pool.Senders) != 2 {
		t.Fatalf("pool %+v, %v", pool, err)
	}
	if _, err := senderlease.Acquire(ctx, kv, senderlease.Lease{Domain: "chain", Batch: 100}, nil, now); !errors.Is(err, senderlease.ErrNoSender) {
		t.Fatalf("no senders configured: %v, want ErrNoSender", err)
	}
}

// A submitter's batches hold at most its share of the pool, however many
// race for it: the rest are refused with ErrShare while senders are
// free, and another submitter's batch takes one of those. A batch holding
// a sender finds it again at its share, and a release makes room.
func TestSenderShare(t *testing.T) {
	env := testnats.Start(t, []string{"chain"})
	ctx := testnats.Context(t, 20*time.Second)
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketSenders)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b", "c", "d"}
	now := time.Now()
	lease := func(id uint64, who string) senderlease.Lease {
		return senderlease.Lease{Domain: "chain", Batch: id, Submitter: who, Share: 2}
	}
	won := raceForSenders(t, func(id uint64) (string, error) {
		return senderlease.Acquire(ctx, kv, lease(id, "alice"), names, now)
	}, senderlease.ErrShare)
	if len(won) != 2 {
		t.Fatalf("alice's batches won %v, want her share of 2 of the 4 senders", won)
	}
	var held uint64
	for id, name := range won {
		held = id
		if again, err := senderlease.Acquire(ctx, kv, lease(id, "alice"), names, now); err != nil || again != name {
			t.Fatalf("batch %d asking again at its submitter's share: %q, %v; want its %q", id, again, err, name)
		}
	}
	if _, err := senderlease.Acquire(ctx, kv, lease(20, "alice"), names, now); !errors.Is(err, senderlease.ErrShare) || errors.Is(err, senderlease.ErrNoSender) {
		t.Fatalf("alice's third batch: %v, want ErrShare", err)
	}
	if name, err := senderlease.Acquire(ctx, kv, lease(30, "bob"), names, now); err != nil || name == "" {
		t.Fatalf("bob's batch with two senders free: %q, %v", name, err)
	}
	pool, err := senderlease.Load(ctx, kv, "chain")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range pool.Senders {
		want := map[uint64]string{30: "bob"}[s.Batch]
		if _, ok := won[s.Batch]; ok {
			want = "alice"
		}
		if s.Submitter != want {
			t.Fatalf("sender %+v: submitter %q, want %q", s, s.Submitter, want)
		}
	}
	if _, err := senderlease.Release(ctx, kv, "chain", held, now); err != nil {
		t.Fatal(err)
	}
	if name, err := senderlease.Acquire(ctx, kv, lease(20, "alice"), names, now); err != nil || name == "" {
		t.Fatalf("alice's third batch after one of hers ended: %q, %v", name, err)
	}
	// No share: one submitter may hold the whole pool.
	for id := uint64(40); id < 42; id++ {
		if _, err := senderlease.Acquire(ctx, kv, senderlease.Lease{Domain: "chain", Batch: id, Submitter: "carol"}, []string{"e", "f"}, now); err != nil {
			t.Fatalf("batch %d without a share: %v", id, err)
		}
	}
}

// raceForSenders runs acquire for batches 1 to 8 at once and returns the
// sender each winner got; a batch refused with lost is no winner, any other
// error fails the test.
func raceForSenders(t *testing.T, acquire func(id uint64) (string, error), lost error) map[uint64]string {
	t.Helper()
	var mu sync.Mutex
	won := map[uint64]string{}
	var wg sync.WaitGroup
	for id := uint64(1); id <= 8; id++ {
		wg.Go(func() {
			name, err := acquire(id)
			switch {
			case errors.Is(err, lost):
			case err != nil:
				t.Error(err)
			default:
				mu.Lock()
				won[id] = name
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return won
}
