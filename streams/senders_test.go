package streams_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/streams"
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
	var mu sync.Mutex
	won := map[uint64]string{}
	var wg sync.WaitGroup
	for id := uint64(1); id <= 8; id++ {
		wg.Go(func() {
			name, err := streams.AcquireSender(ctx, kv, streams.SenderLease{Domain: "chain", Batch: id, Key: "k"}, names, now)
			switch {
			case errors.Is(err, streams.ErrNoSender):
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
	if len(won) != 2 {
		t.Fatalf("winners %v, want 2", won)
	}
	held := map[string]uint64{}
	for id, name := range won {
		if other, dup := held[name]; dup {
			t.Fatalf("sender %s leased to batches %d and %d", name, other, id)
		}
		held[name] = id
		again, err := streams.AcquireSender(ctx, kv, streams.SenderLease{Domain: "chain", Batch: id}, names, now)
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
		if _, err := streams.ReleaseSender(ctx, kv, "chain", first, now); err != nil {
			t.Fatal(err)
		}
	}
	if name, err := streams.AcquireSender(ctx, kv, streams.SenderLease{Domain: "chain", Batch: 99}, names, now); err != nil || name != won[first] {
		t.Fatalf("after the release: %q, %v; want %q", name, err, won[first])
	}
	pool, err := streams.LoadSenders(ctx, kv, "chain")
	if err != nil || len(pool.Senders) != 2 {
		t.Fatalf("pool %+v, %v", pool, err)
	}
	if _, err := streams.AcquireSender(ctx, kv, streams.SenderLease{Domain: "chain", Batch: 100}, nil, now); !errors.Is(err, streams.ErrNoSender) {
		t.Fatalf("no senders configured: %v, want ErrNoSender", err)
	}
}
