package processor

import (
	"context"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// cacheSize bounds the batches kept in memory; their content never changes.
const cacheSize = 4096

// batchCache keeps the batches read from the batches bucket in memory.
type batchCache struct {
	kv jetstream.KeyValue // the batches bucket
	mu sync.Mutex
	m  map[uint64]*pipeline.Batch
}

// get returns the batch with id, from memory or the batches bucket.
func (c *batchCache) get(ctx context.Context, id uint64) (*pipeline.Batch, error) {
	c.mu.Lock()
	b, ok := c.m[id]
	c.mu.Unlock()
	if ok {
		return b, nil
	}
	e, err := c.kv.Get(ctx, streams.BatchKey(id))
	if err != nil {
		return nil, err
	}
	rec, err := records.Decode[records.BatchRecord](e.Value())
	if err != nil {
		return nil, err
	}
	b = &rec.Batch
	c.mu.Lock()
	if len(c.m) >= cacheSize {
		for k := range c.m { // evict an arbitrary entry
			delete(c.m, k)
			break
		}
	}
	c.m[id] = b
	c.mu.Unlock()
	return b, nil
}

// forget drops batch id from memory (a finished batch).
func (c *batchCache) forget(id uint64) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}
