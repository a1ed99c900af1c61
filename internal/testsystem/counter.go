package testsystem

import (
	"context"
	"sync"

	"github.com/tickflow/tickflow/pipeline"
)

// Counter counts the handler executions of a mux per idempotency key, and
// keeps the payload each key's last execution got.
type Counter struct {
	mu       sync.Mutex
	n        map[string]int
	payloads map[string]pipeline.Payload
}

// Count installs a Counter on mux: every handler registered on it, before
// or after, is counted.
func Count(mux *pipeline.ServeMux) *Counter {
	c := &Counter{n: map[string]int{}, payloads: map[string]pipeline.Payload{}}
	mux.Use(func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
			c.Add(call.IdempotencyKey())
			c.mu.Lock()
			c.payloads[call.IdempotencyKey()] = call.Payload
			c.mu.Unlock()
			return next.Handle(ctx, call)
		})
	})
	return c
}

// Add counts one execution of key.
func (c *Counter) Add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[key]++
}

// Get is how many times key executed.
func (c *Counter) Get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// Total is how many executions there were in all.
func (c *Counter) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := 0
	for _, v := range c.n {
		t += v
	}
	return t
}

// Payload is the payload key's last execution got, and whether it ran.
func (c *Counter) Payload(key string) (pipeline.Payload, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.payloads[key]
	return p, ok
}
