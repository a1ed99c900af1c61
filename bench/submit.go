package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/streams"
)

// sendBody is the JSON a caller sends to authz.<user>.send.
func sendBody(label string, functions int) []byte {
	req := authz.SendRequest{Label: label}
	for range functions {
		req.Functions = append(req.Functions, authz.CallSpec{Type: "noop"})
	}
	b, err := json.Marshal(req)
	if err != nil {
		panic(err)
	}
	return b
}

// send submits one batch through authz and returns its id.
func send(ctx context.Context, nc *nats.Conn, subject string, body []byte, timeout time.Duration) (uint64, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	m := nats.NewMsg(subject)
	m.Data = body
	resp, err := nc.RequestMsgWithContext(rctx, m)
	if err != nil {
		return 0, err
	}
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		return 0, fmt.Errorf("authz refused (%s): %s", code, resp.Header.Get(micro.ErrorHeader))
	}
	var rep authz.SendReply
	if err := json.Unmarshal(resp.Data, &rep); err != nil {
		return 0, fmt.Errorf("authz reply %q: %w", resp.Data, err)
	}
	return rep.ID, nil
}

// submitAll submits n batches as alice from a pool of `inflight` goroutines,
// so that many requests are in flight at once, and returns how long it took.
// A non-nil window bounds the batches submitted but not yet done: each
// submission first puts a token into it, and whoever sees a batch done
// takes one out.
func submitAll(ctx context.Context, nc *nats.Conn, label string, functions, n, inflight int, window chan struct{}) (time.Duration, error) {
	subject := streams.AuthzSubject("alice", "send")
	body := sendBody(label, functions)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range min(inflight, n) {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if window != nil {
					select {
					case window <- struct{}{}:
					case <-ctx.Done():
						errOnce.Do(func() { firstErr = ctx.Err() })
						return
					}
				}
				if _, err := send(ctx, nc, subject, body, 30*time.Second); err != nil {
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
