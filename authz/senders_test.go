package authz_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

const senderTable = `
labels:
  chain:
    domain: pay
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      chain.dispatch:
        sender: true
        inclusion: {poll_every: 20ms, max_wait: 1m, by: [oracle]}
        retry: {times: 1, backoff: {kind: fixed, initial: 1m}}
`

// pendingTx dispatches a transaction that polls never find included.
type pendingTx struct{}

func (pendingTx) Handle(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	return pipeline.Result{Ref: "tx-" + call.Sender}, nil
}

func (pendingTx) Poll(context.Context, *pipeline.Call, string) (bool, error) { return false, nil }

// setupSenders runs authz with senderTable, a worker dispatching pending
// transactions and a processor (ticked by the test) with one sender, s1.
func setupSenders(t *testing.T) *bundle {
	t.Helper()
	return setupSendersWith(t, senderTable, pendingTx{}, "s1")
}

// setupSendersWith runs authz with table, a worker serving chain.dispatch
// with h and a processor (ticked by the test) with the senders named.
func setupSendersWith(t *testing.T, tableYAML string, h pipeline.Handler, senders ...string) *bundle {
	t.Helper()
	b := &bundle{}
	mux := pipeline.NewServeMux()
	b.calls = counter{testsystem.Count(mux)}
	mux.Register("chain.dispatch", h)
	b.start(t, tableYAML, mux, &processor.Options{Senders: senders, SenderWait: 20 * time.Millisecond})
	return b
}

func (b *bundle) senders(t *testing.T) []api.SenderState {
	t.Helper()
	var rep api.SendersReply
	if e := b.call(t, "owner", api.OpSenders, api.SendersRequest{Domain: domain}, &rep); e != nil {
		t.Fatalf("senders: %+v", e)
	}
	return rep.Senders
}

func (b *bundle) sendKeyed(t *testing.T, key string) uint64 {
	t.Helper()
	var rep api.SendReply
	if e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: "chain", Key: key, Functions: api.Calls{{Type: "chain.dispatch"}}}, &rep); e != nil {
		t.Fatalf("send: %+v", e)
	}
	return rep.ID
}

// position returns where batch id is in the domain's Med queue.
func (b *bundle) position(t *testing.T, id uint64) int {
	t.Helper()
	for i, q := range b.queue(t, pipeline.Med) {
		if q == id {
			return i
		}
	}
	t.Fatalf("the queue lacks batch %d", id)
	return -1
}

// progressState is the state of batch id's progress as the owner sees it.
func (b *bundle) progressState(t *testing.T, id uint64) api.State {
	t.Helper()
	var rep api.BatchReply
	if e := b.call(t, "owner", api.OpBatch, api.IDRequest{ID: id}, &rep); e != nil {
		t.Fatalf("batch: %+v", e)
	}
	if rep.Progress == nil {
		return ""
	}
	return rep.Progress.State
}

// A batch waiting for the inclusion of what it dispatched cannot be
// cancelled or evicted: its sender stays bound to the dispatch, which may
// still be included. Once the wait is over (here a failed dispatch that
// waits for its retry) the owner evicts it: authz applies the eviction's
// callback and releases the sender, which the next key leases.
func TestEvictReleasesTheSender(t *testing.T) {
	b := setupSenders(t)
	first := b.sendKeyed(t, "k1")
	second := b.sendKeyed(t, "k2")
	var s []api.SenderState
	testnats.Eventually(t, 10*time.Second, "s1 leased", func() bool {
		b.proc.Tick(b.ctx, 4)
		s = b.senders(t)
		return len(s) == 1 && s[0].State == api.SenderLeased
	})
	// Either batch may have come first: the other one waits.
	keys := map[uint64]string{first: "k1", second: "k2"}
	if s[0].Batch == second {
		first, second = second, first
	}
	if s[0].Name != "s1" || s[0].Key != keys[first] || s[0].Since.IsZero() || s[0].Processor == "" {
		t.Fatalf("senders %+v", s)
	}
	// The keys listing names the sender bound to the running key.
	var kr api.KeysReply
	if e := b.call(t, "owner", api.OpKeys, api.KeysRequest{Domain: domain}, &kr); e != nil {
		t.Fatalf("keys: %+v", e)
	}
	bound := map[string]string{}
	for _, k := range kr.Keys {
		bound[k.Key] = k.Sender
	}
	if bound[keys[first]] != "s1" || bound[keys[second]] != "" {
		t.Fatalf("keys %+v: want s1 bound to %s only", kr.Keys, keys[first])
	}
	if e := b.call(t, "alice", api.OpSenders, api.SendersRequest{Domain: domain}, nil); e == nil || e.Code != "403" {
		t.Fatalf("alice listed the senders: %+v", e)
	}
	// The first batch is parked (waiting for inclusion) at position 0 or 1:
	// neither its submitter nor the owner can end it now.
	testnats.Eventually(t, 10*time.Second, "first batch parked", func() bool {
		return b.progressState(t, first) == api.StateParked
	})
	if e := b.call(t, "owner", api.OpEvict, api.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: b.position(t, first)}, nil); e == nil || e.Code != "409" || !strings.Contains(e.Msg, "inclusion") {
		t.Fatalf("evict of a batch waiting for inclusion: %+v, want 409", e)
	}
	for _, user := range []string{"alice", "owner"} {
		if e := b.call(t, user, api.OpCancel, api.IDRequest{ID: first}, nil); e == nil || e.Code != "409" || !strings.Contains(e.Msg, "inclusion") {
			t.Fatalf("%s cancelled a batch waiting for inclusion: %+v, want 409", user, e)
		}
	}
	if s = b.senders(t); len(s) != 1 || s[0].Batch != first {
		t.Fatalf("senders %+v after the refusals, want s1 still leased to batch %d", s, first)
	}
	if rec := b.record(t, first); rec.Status.Terminal() {
		t.Fatalf("first batch %s after the refusals", rec.Status)
	}
	// The dispatch failed: the batch waits a minute for its retry, holding
	// its sender, and now the owner evicts it.
	if e := b.call(t, "oracle", api.OpConfirm, api.ConfirmRequest{ID: first, Index: 0, Content: pipeline.ConfirmFailed, Ref: "tx-s1"}, nil); e != nil {
		t.Fatalf("oracle confirm: %+v", e)
	}
	cctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.proc.Run(cctx) }()
	testnats.Eventually(t, 10*time.Second, "first batch waits for its retry", func() bool {
		return b.progressState(t, first) == api.StateQueued
	})
	cancel()
	<-done
	if e := b.call(t, "owner", api.OpEvict, api.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: b.position(t, first)}, nil); e != nil {
		t.Fatalf("evict: %+v", e)
	}
	testnats.Eventually(t, 10*time.Second, "s1 leased to the second batch", func() bool {
		b.proc.Tick(b.ctx, 4)
		s = b.senders(t)
		return len(s) == 1 && s[0].Batch == second && s[0].Key == keys[second]
	})
	if rec := b.record(t, first); rec.Status != pipeline.RemovedByOwner {
		t.Fatalf("first batch %s", rec.Status)
	}
}

// A confirmation of a function waiting for inclusion is taken from the
// identities its rule names, with the inclusion contents only.
func TestConfirmInclusion(t *testing.T) {
	b := setupSenders(t)
	id := b.sendKeyed(t, "k1")
	testnats.Eventually(t, 10*time.Second, "parked", func() bool {
		b.proc.Tick(b.ctx, 4)
		var rep api.BatchReply
		if e := b.call(t, "owner", api.OpBatch, api.IDRequest{ID: id}, &rep); e != nil {
			t.Fatalf("batch: %+v", e)
		}
		return rep.Progress != nil && rep.Progress.State == api.StateParked
	})
	if e := b.call(t, "bob", api.OpConfirm, api.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmIncluded}, nil); e == nil || e.Code != "404" {
		t.Fatalf("bob confirmed: %+v", e)
	}
	if e := b.call(t, "alice", api.OpConfirm, api.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmIncluded}, nil); e == nil || e.Code != "403" {
		t.Fatalf("alice confirmed: %+v", e)
	}
	// A confirmation names the dispatch it is about: the parked one's
	// Result.Ref. One about another dispatch, or none, would be dropped, so
	// it is refused.
	for _, ref := range []string{"", "tx-other"} {
		if e := b.call(t, "oracle", api.OpConfirm, api.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmFailed, Ref: ref}, nil); e == nil || e.Code != "409" {
			t.Fatalf("oracle confirmed dispatch %q: %+v, want 409", ref, e)
		}
	}
	if e := b.call(t, "oracle", api.OpConfirm, api.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx-s1"}, nil); e != nil {
		t.Fatalf("oracle confirm: %+v", e)
	}
	cctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.proc.Run(cctx) }()
	defer func() { cancel(); testnats.Stopped(t, "processor", done) }()
	if rec := b.settled(t, id); rec.Status != pipeline.Executed {
		t.Fatalf("status %s", rec.Status)
	}
	testnats.Eventually(t, 10*time.Second, "s1 free", func() bool {
		s := b.senders(t)
		return len(s) == 1 && s[0].State == api.SenderFree
	})
}

// heldTx dispatches a transaction per call that polls find included once
// the submitter is let through: bob's at once, alice's after release.
type heldTx struct {
	mu       sync.Mutex
	released bool
}

func (*heldTx) Handle(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	return pipeline.Result{Ref: fmt.Sprintf("tx-%d-%d-%d", call.BatchID, call.Index, call.Attempt)}, nil
}

func (h *heldTx) Poll(_ context.Context, call *pipeline.Call, _ string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return call.Submitter == "bob" || h.released, nil
}

func (h *heldTx) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = true
}

const sharedPoolTable = `
labels:
  chain:
    domain: pay
    users: [alice, bob]
    mode: non_atomic
    priority: med
    functions:
      chain.dispatch:
        sender: true
        inclusion: {poll_every: 20ms, max_wait: 1m, by: [oracle]}
`

func dispatches(n int) []api.CallSpec {
	calls := make([]api.CallSpec, n)
	for i := range calls {
		calls[i] = api.CallSpec{Type: "chain.dispatch"}
	}
	return calls
}

// One submitter cannot hold every sender of a pool: alice's two long
// batches, whose dispatches are not included until the test says so, get
// one sender of two between them (the other waits for her share), and
// bob's one-function batch takes the other and is executed while both of
// alice's are still in process. Then alice's finish, one after the other.
func TestOneSubmitterCannotHoldEverySender(t *testing.T) {
	h := &heldTx{}
	b := setupSendersWith(t, sharedPoolTable, h, "s1", "s2")
	alice := []uint64{b.send(t, "alice", "chain", dispatches(5)...), b.send(t, "alice", "chain", dispatches(5)...)}
	testnats.Eventually(t, 10*time.Second, "a batch of alice's parked with a sender", func() bool {
		b.proc.Tick(b.ctx, 8)
		return b.progressState(t, alice[0]) == api.StateParked || b.progressState(t, alice[1]) == api.StateParked
	})
	bob := b.send(t, "bob", "chain", dispatches(1)...)
	testnats.Eventually(t, 15*time.Second, "bob's batch executed while alice's wait", func() bool {
		b.proc.Tick(b.ctx, 8)
		return b.record(t, bob).Status == pipeline.Executed
	})
	for _, id := range alice {
		if rec := b.record(t, id); rec.Status.Terminal() {
			t.Fatalf("alice's batch %d is %s: the test holds her dispatches", id, rec.Status)
		}
	}
	aliceHeld := 0
	for _, s := range b.senders(t) {
		if s.State == api.SenderLeased && s.Submitter == "alice" {
			aliceHeld++
		}
	}
	if aliceHeld != 1 {
		t.Fatalf("alice holds %d senders of 2, want her share of 1: %+v", aliceHeld, b.senders(t))
	}
	h.release()
	testnats.Eventually(t, 20*time.Second, "alice's batches executed", func() bool {
		b.proc.Tick(b.ctx, 8)
		return b.record(t, alice[0]).Status == pipeline.Executed && b.record(t, alice[1]).Status == pipeline.Executed
	})
	testnats.Eventually(t, 10*time.Second, "every sender free", func() bool {
		for _, s := range b.senders(t) {
			if s.State != api.SenderFree {
				return false
			}
		}
		return true
	})
}

// A batch that needs a sender holds it until it ends, so its label bounds
// its size: by default DefaultSenderMaxFunctions, or max_functions. A
// batch over the bound is refused with a 400 that names it, and nothing of
// it is queued.
func TestSenderBatchSizeBound(t *testing.T) {
	const table = senderTable + `  short:
    domain: pay
    users: [alice]
    mode: non_atomic
    priority: med
    max_functions: 2
    functions:
      chain.dispatch: {sender: true}
      noop: {}
`
	b := setupSendersWith(t, table, pendingTx{}, "s1")
	tests := []struct {
		name, label string
		calls       []api.CallSpec
		want        string // empty: accepted
	}{
		{name: "default bound", label: "chain", calls: dispatches(authz.DefaultSenderMaxFunctions + 1),
			want: fmt.Sprintf(`at most %d functions under label "chain" (max_functions; got %d)`, authz.DefaultSenderMaxFunctions, authz.DefaultSenderMaxFunctions+1)},
		{name: "at the default bound", label: "chain", calls: dispatches(authz.DefaultSenderMaxFunctions)},
		{name: "max_functions", label: "short", calls: dispatches(3), want: `at most 2 functions under label "short" (max_functions; got 3)`},
		{name: "max_functions without a sender", label: "short", calls: []api.CallSpec{noop(), noop(), noop()}, want: `at most 2 functions under label "short"`},
		{name: "at max_functions", label: "short", calls: dispatches(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(b.queue(t, pipeline.Med))
			var rep api.SendReply
			e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: tt.label, Functions: tt.calls}, &rep)
			switch {
			case tt.want == "" && e != nil:
				t.Fatalf("send: %+v, want accepted", e)
			case tt.want == "":
				return
			case e == nil || e.Code != "400" || !strings.Contains(e.Msg, tt.want):
				t.Fatalf("send: %+v (batch %d), want 400 saying %q", e, rep.ID, tt.want)
			}
			if after := len(b.queue(t, pipeline.Med)); after != before {
				t.Fatalf("the refused batch was queued: %d batches, were %d", after, before)
			}
		})
	}
}
