package processor

import (
	"errors"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// TestBatchCache: a batch is read from the batches bucket once, then
// from memory, until it is forgotten; a record that does not decode is an
// error and is not kept; the cache holds at most cacheSize batches; and
// it is safe for concurrent steps.
func TestBatchCache(t *testing.T) {
	p := startParts(t)
	kv, err := p.js.KeyValue(p.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := p.admin.KeyValue(p.ctx, streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	record := func(id uint64) {
		t.Helper()
		if _, err := admin.Put(p.ctx, streams.BatchKey(id), must(records.Encode(&records.BatchRecord{Batch: *batchOf(id)}))); err != nil {
			t.Fatal(err)
		}
	}
	c := &batchCache{kv: kv, m: map[uint64]*pipeline.Batch{}}

	record(5)
	b, err := c.get(p.ctx, 5)
	if err != nil || b.ID != 5 || b.Key != "k" || b.Domain != partsDomain {
		t.Fatalf("get(5) = %+v, %v", b, err)
	}
	if err := admin.Delete(p.ctx, streams.BatchKey(5)); err != nil {
		t.Fatal(err)
	}
	if again, err := c.get(p.ctx, 5); err != nil || again != b {
		t.Fatalf("get(5) again = %p, %v; want the batch in memory %p", again, err, b)
	}
	c.forget(5)
	if _, err := c.get(p.ctx, 5); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("get(5) once forgotten and gone from the bucket: %v, want ErrKeyNotFound", err)
	}

	if _, err := admin.Put(p.ctx, streams.BatchKey(6), []byte("junk")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.get(p.ctx, 6); !errors.Is(err, records.ErrDecode) {
		t.Fatalf("get of an undecodable record: %v, want ErrDecode", err)
	}
	record(6)
	if b, err := c.get(p.ctx, 6); err != nil || b.ID != 6 {
		t.Fatalf("get(6) once its record is good = %+v, %v", b, err)
	}

	for id := uint64(1_000_000); len(c.m) < cacheSize; id++ {
		c.m[id] = &pipeline.Batch{ID: id}
	}
	record(7)
	if b, err := c.get(p.ctx, 7); err != nil || b.ID != 7 {
		t.Fatalf("get(7) = %+v, %v", b, err)
	}
	if n := len(c.m); n != cacheSize || c.m[7] == nil {
		t.Fatalf("the cache holds %d batches (batch 7: %v), want %d with the newest", n, c.m[7] != nil, cacheSize)
	}

	for id := uint64(10); id < 20; id++ {
		record(id)
	}
	c = &batchCache{kv: kv, m: map[uint64]*pipeline.Batch{}}
	var wg sync.WaitGroup
	errs := make(chan error, 8*50)
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				id := uint64(10 + (g+i)%10)
				if b, err := c.get(p.ctx, id); err != nil || b.ID != id {
					errs <- errors.Join(err, errors.New("wrong batch"))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(c.m) != 10 {
		t.Fatalf("after concurrent gets the cache holds %d batches, want 10", len(c.m))
	}
}
