package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
)

// idempotencyKeys, when set (-idempotency-keys), gives every batch the
// submits send an idempotency key of its own.
var idempotencyKeys bool

// idemRun tells the keys of one submit from another's in the same process.
var idemRun atomic.Int64

// idemKeyer returns the idempotency key of batch i (from 1) of a new
// submit: "" without -idempotency-keys.
func idemKeyer() func(i int64) string {
	if !idempotencyKeys {
		return func(int64) string { return "" }
	}
	run := idemRun.Add(1)
	return func(i int64) string { return fmt.Sprintf("bench-%d-%d-%d", time.Now().UnixNano(), run, i) }
}

// sendRequest is a submission of functions noop functions under label.
func sendRequest(label string, functions int) api.SendRequest {
	req := api.SendRequest{Label: label}
	for range functions {
		req.Functions = append(req.Functions, api.CallSpec{Type: "noop"})
	}
	return req
}

// aliceClient is the authz client of alice over nc, each request bounded
// by timeout.
func aliceClient(nc *nats.Conn, timeout time.Duration) (*client.Client, error) {
	return client.New(nc, "alice", client.Config{Timeout: timeout})
}

// send submits one batch through authz and returns its id.
func send(ctx context.Context, c *client.Client, req api.SendRequest) (uint64, error) {
	rep, err := c.Send(ctx, req)
	if err != nil {
		return 0, err
	}
	return rep.ID, nil
}

// submitAll submits n batches as alice from a pool of `inflight` goroutines,
// so that many requests are in flight at once, and returns how long it took.
// A non-nil window bounds the batches submitted but not yet done: each
// submission first puts a token into it, and whoever sees a batch done
// takes one out.
func submitAll(ctx context.Context, nc *nats.Conn, label string, functions, n, inflight int, window chan struct{}) (time.Duration, error) {
	return submitEach(ctx, nc, label, functions, n, inflight, window, nil)
}

// submitEach is submitAll where keyOf, when set, gives submission i
// (from 1) its key.
func submitEach(ctx context.Context, nc *nats.Conn, label string, functions, n, inflight int, window chan struct{}, keyOf func(i int64) string) (time.Duration, error) {
	c, err := aliceClient(nc, 30*time.Second)
	if err != nil {
		return 0, err
	}
	req := sendRequest(label, functions)
	idemOf := idemKeyer()
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range min(inflight, n) {
		wg.Go(func() {
			r := req
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if keyOf != nil {
					r.Key = keyOf(i)
				}
				r.IdempotencyKey = idemOf(i)
				if window != nil {
					select {
					case window <- struct{}{}:
					case <-ctx.Done():
						errOnce.Do(func() { firstErr = ctx.Err() })
						return
					}
				}
				if _, err := send(ctx, c, r); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("submit %d: %w", i, err) })
					next.Store(int64(n)) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// submitMany submits n batches as alice with send_many, k batches a
// request (the last request carries what is left), from a pool of
// `inflight` goroutines each with one request in flight, and returns how
// long it took. Every batch's result is checked: a request refused whole
// (a 429 included: it is not sent again) or a batch not queued fails the
// submit, since a batch missing from the count would inflate the rate.
func submitMany(ctx context.Context, nc *nats.Conn, label string, functions, n, k, inflight int) (time.Duration, error) {
	if k < 1 || k > api.MaxSendMany {
		return 0, fmt.Errorf("send_many: %d batches a request; expected 1 to %d", k, api.MaxSendMany)
	}
	c, err := aliceClient(nc, 30*time.Second)
	if err != nil {
		return 0, err
	}
	one := sendRequest(label, functions)
	full := api.SendManyRequest{Batches: make([]api.SendRequest, k)}
	for i := range full.Batches {
		full.Batches[i] = one
	}
	requests := (n + k - 1) / k
	idemOf := idemKeyer()
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		next.Store(int64(requests)) // stop the others
	}
	var wg sync.WaitGroup
	start := time.Now()
	for range sendManyInflight(inflight, n, k) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) // request i carries batches (i-1)·k+1 … min(i·k, n)
				if i > requests {
					return
				}
				req := full
				if rest := n - (i-1)*k; rest < k {
					req.Batches = full.Batches[:rest]
				}
				if idempotencyKeys {
					req.Batches = slices.Clone(req.Batches)
					for j := range req.Batches {
						req.Batches[j].IdempotencyKey = idemOf(int64((i-1)*k + j + 1))
					}
				}
				rep, err := c.SendMany(ctx, req)
				if err != nil {
					fail(fmt.Errorf("send_many request %d: %w", i, err))
					return
				}
				for j := range rep.Results {
					if err := client.ResultError(&rep.Results[j]); err != nil {
						fail(fmt.Errorf("send_many request %d, batch %d: %w", i, j, err))
						return
					}
					if rep.Results[j].ID == 0 || rep.Results[j].Duplicate {
						fail(fmt.Errorf("send_many request %d, batch %d: queued with id %d, duplicate %v; expected a new batch",
							i, j, rep.Results[j].ID, rep.Results[j].Duplicate))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start), firstErr
}

// sendManyInflight is how many send_many requests submitMany keeps in
// flight for n batches, k a request: as many requests as the single-send
// submit keeps (-inflight), fewer when there are fewer.
func sendManyInflight(inflight, n, k int) int {
	return min(inflight, (n+k-1)/k)
}
