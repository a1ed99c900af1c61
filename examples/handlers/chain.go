package handlers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// TypeDispatch is the function type of Chain: sign a transaction with the
// batch's sender, dispatch it, and wait for its inclusion in a block.
const TypeDispatch = "chain.dispatch"

// DispatchArgs is the payload of chain.dispatch.
type DispatchArgs struct {
	// Method is what the transaction calls.
	Method string `msgpack:"method"`
	// DropAttempts is how many dispatches the chain drops (never includes):
	// each of them fails when its wait for inclusion runs out, and the
	// next attempt dispatches again with a higher fee.
	DropAttempts int `msgpack:"drop_attempts"`
}

// Dispatched is the output of chain.dispatch.
type Dispatched struct {
	Tx     string `msgpack:"tx"`
	Fee    int64  `msgpack:"fee"`
	Sender string `msgpack:"sender"`
	// Signed says the sender's secret resolved on the worker.
	Signed bool `msgpack:"signed"`
}

// Chain is an example of a handler whose effect is a transaction on a
// chain: its success means "dispatched", and the batch waits for the
// transaction's inclusion, which Poll reports. The fee doubles with each
// attempt, as a sequencer raises it after a transaction was not included.
// It is an in-memory stand-in: a transaction is included IncludeAfter after
// its dispatch unless dropped.
type Chain struct {
	// IncludeAfter is how long after its dispatch a transaction is included.
	IncludeAfter time.Duration

	mu  sync.Mutex
	txs map[string]chainTx
	// Included and Failed count the success and failure hooks called.
	Included, Failed int
}

type chainTx struct {
	at      time.Time
	dropped bool
}

// NewChain returns an empty chain that includes transactions includeAfter
// after their dispatch.
func NewChain(includeAfter time.Duration) *Chain {
	return &Chain{IncludeAfter: includeAfter, txs: map[string]chainTx{}}
}

// Handle dispatches the call's transaction, signed by its sender, with a
// fee that doubles per attempt.
func (c *Chain) Handle(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var a DispatchArgs
	if err := call.Payload.Decode(&a); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	if call.Sender == "" {
		return pipeline.Result{}, pipeline.Permanent(fmt.Errorf("handlers: %s needs a sender: declare sender: true for it", TypeDispatch))
	}
	signed := false
	if call.SenderSecret != nil {
		_, err := call.SenderSecret() // a real dispatcher signs with it
		signed = err == nil
	}
	fee := int64(10) << min(call.Attempt-1, 20)
	h := sha256.Sum256([]byte(call.IdempotencyKey() + "/" + strconv.Itoa(call.Attempt) + "/" + call.Sender))
	tx := "0x" + hex.EncodeToString(h[:8])
	c.mu.Lock()
	c.txs[tx] = chainTx{at: time.Now(), dropped: call.Attempt <= a.DropAttempts}
	c.mu.Unlock()
	return pipeline.Result{Data: pipeline.MustPayload(Dispatched{Tx: tx, Fee: fee, Sender: call.Sender, Signed: signed}), Ref: tx}, nil
}

// Poll reports whether the transaction ref was included.
func (c *Chain) Poll(_ context.Context, _ *pipeline.Call, ref string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tx, ok := c.txs[ref]
	switch {
	case !ok:
		return false, fmt.Errorf("%w %s", ErrUnknownTx, ref)
	case tx.dropped:
		return false, nil
	}
	return time.Since(tx.at) >= c.IncludeAfter, nil
}

// OnSuccess counts an included transaction.
func (c *Chain) OnSuccess(context.Context, *pipeline.Call, pipeline.Result) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Included++
	return nil
}

// OnFailure counts a transaction given up on.
func (c *Chain) OnFailure(context.Context, *pipeline.Call, pipeline.Failure) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Failed++
	return nil
}
