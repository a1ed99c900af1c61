package streams_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

func TestUpdateKVConcurrentWritersAllLand(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	ctx := testnats.Context(t, 20*time.Second)
	kv, err := env.JS(t, "admin").KeyValue(ctx, streams.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Go(func() {
			_, err := streams.UpdateKV(ctx, kv, "counter", func(cur []byte, exists bool) ([]byte, error) {
				n := 0
				if exists {
					n, _ = strconv.Atoi(string(cur))
				}
				return []byte(strconv.Itoa(n + 1)), nil
			})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	e, err := kv.Get(ctx, "counter")
	if err != nil || string(e.Value()) != strconv.Itoa(writers) {
		t.Fatalf("counter = %v (%v), want %d", e, err, writers)
	}
	// Writing nothing is allowed, and an error from change comes back as it is.
	if rev, err := streams.UpdateKV(ctx, kv, "counter", func([]byte, bool) ([]byte, error) { return nil, nil }); rev != 0 || err != nil {
		t.Fatalf("no-op update = %d, %v", rev, err)
	}
	boom := errors.New("boom")
	if _, err := streams.UpdateKV(ctx, kv, "counter", func([]byte, bool) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("got %v, want boom", err)
	}
}

func TestProgressStoreCompareAndSet(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	ctx := context.Background()
	kv, err := env.JS(t, "admin").KeyValue(testnats.Context(t, 10*time.Second), streams.BucketProgress)
	if err != nil {
		t.Fatal(err)
	}
	store := streams.NewProgressStore(kv, nil)
	a, err := store.Load(ctx, "payments", 7)
	if err != nil || a.Rev != 0 || a.State != records.Queued {
		t.Fatalf("fresh load = %+v, %v", a, err)
	}
	b := *a
	a.Next = 1
	if err := store.Save(ctx, "payments", a); err != nil {
		t.Fatal(err)
	}
	if a.UpdatedAt.Location() != time.UTC || a.Rev == 0 {
		t.Fatalf("saved entry: %+v", a)
	}
	b.Next = 2 // a second writer that read before the first saved
	if err := store.Save(ctx, "payments", &b); !errors.Is(err, streams.ErrConflict) {
		t.Fatalf("concurrent create = %v, want ErrConflict", err)
	}
	c, err := store.Load(ctx, "payments", 7)
	if err != nil || c.Next != 1 {
		t.Fatalf("load = %+v, %v", c, err)
	}
	if !c.Live(records.Token{BatchID: 7}) || c.Live(records.Token{BatchID: 7, Rotation: 1}) {
		t.Fatal("Live: the token of the record's generation and step is live, others are not")
	}
	c.State = records.Done
	if c.Live(records.Token{BatchID: 7}) {
		t.Fatal("Live: no token of a finished batch is live")
	}
}
