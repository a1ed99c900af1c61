package authz_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/streams"
	"github.com/tickflow/tickflow/worker"
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
	env := testnats.Start(t, []string{domain}, testnats.WithSettings(func(s *streams.Settings) { s.AckWait = time.Second }))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b := &bundle{env: env, ctx: ctx, calls: &counter{n: map[string]int{}}}
	table, err := authz.ParseTable([]byte(senderTable))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := authz.New(ctx, env.Conn(t, "authz"), authz.Options{Owner: "owner", Table: table})
	if err != nil {
		t.Fatal(err)
	}
	mux := pipeline.NewServeMux()
	mux.Register("chain.dispatch", pendingTx{})
	w, err := worker.New(ctx, env.Conn(t, "worker"), mux, worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []func(context.Context) error{svc.Run, w.Run} {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = run(rctx) }()
		t.Cleanup(func() { rcancel(); testnats.Stopped(t, "authz or worker", done) })
	}
	b.svc = svc
	if b.proc, err = processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: domain, Senders: []string{"s1"}, SenderWait: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *bundle) senders(t *testing.T) []authz.SenderState {
	t.Helper()
	var rep authz.SendersReply
	if e := b.call(t, "owner", "senders", authz.SendersRequest{Domain: domain}, &rep); e != nil {
		t.Fatalf("senders: %+v", e)
	}
	return rep.Senders
}

func (b *bundle) sendKeyed(t *testing.T, key string) uint64 {
	t.Helper()
	var rep authz.SendReply
	if e := b.call(t, "alice", "send", authz.SendRequest{Label: "chain", Key: key, Functions: authz.Calls{{Type: "chain.dispatch"}}}, &rep); e != nil {
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
func (b *bundle) progressState(t *testing.T, id uint64) streams.State {
	t.Helper()
	var rep authz.BatchReply
	if e := b.call(t, "owner", "batch", authz.IDRequest{ID: id}, &rep); e != nil {
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
	var s []authz.SenderState
	testnats.Eventually(t, 10*time.Second, "s1 leased", func() bool {
		b.proc.Tick(b.ctx, 4)
		s = b.senders(t)
		return len(s) == 1 && s[0].State == authz.SenderLeased
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
	var kr authz.KeysReply
	if e := b.call(t, "owner", "keys", authz.KeysRequest{Domain: domain}, &kr); e != nil {
		t.Fatalf("keys: %+v", e)
	}
	bound := map[string]string{}
	for _, k := range kr.Keys {
		bound[k.Key] = k.Sender
	}
	if bound[keys[first]] != "s1" || bound[keys[second]] != "" {
		t.Fatalf("keys %+v: want s1 bound to %s only", kr.Keys, keys[first])
	}
	if e := b.call(t, "alice", "senders", authz.SendersRequest{Domain: domain}, nil); e == nil || e.Code != "403" {
		t.Fatalf("alice listed the senders: %+v", e)
	}
	// The first batch is parked (waiting for inclusion) at position 0 or 1:
	// neither its submitter nor the owner can end it now.
	testnats.Eventually(t, 10*time.Second, "first batch parked", func() bool {
		return b.progressState(t, first) == streams.Parked
	})
	if e := b.call(t, "owner", "evict", authz.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: b.position(t, first)}, nil); e == nil || e.Code != "409" || !strings.Contains(e.Msg, "inclusion") {
		t.Fatalf("evict of a batch waiting for inclusion: %+v, want 409", e)
	}
	for _, user := range []string{"alice", "owner"} {
		if e := b.call(t, user, "cancel", authz.IDRequest{ID: first}, nil); e == nil || e.Code != "409" || !strings.Contains(e.Msg, "inclusion") {
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
	if e := b.call(t, "oracle", "confirm", authz.ConfirmRequest{ID: first, Index: 0, Content: pipeline.ConfirmFailed, Ref: "tx-s1"}, nil); e != nil {
		t.Fatalf("oracle confirm: %+v", e)
	}
	cctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = b.proc.Run(cctx) }()
	testnats.Eventually(t, 10*time.Second, "first batch waits for its retry", func() bool {
		return b.progressState(t, first) == streams.Queued
	})
	cancel()
	<-done
	if e := b.call(t, "owner", "evict", authz.PositionRequest{Domain: domain, Priority: pipeline.Med, Position: b.position(t, first)}, nil); e != nil {
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
		var rep authz.BatchReply
		if e := b.call(t, "owner", "batch", authz.IDRequest{ID: id}, &rep); e != nil {
			t.Fatalf("batch: %+v", e)
		}
		return rep.Progress != nil && rep.Progress.State == streams.Parked
	})
	if e := b.call(t, "bob", "confirm", authz.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmIncluded}, nil); e == nil || e.Code != "404" {
		t.Fatalf("bob confirmed: %+v", e)
	}
	if e := b.call(t, "alice", "confirm", authz.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmIncluded}, nil); e == nil || e.Code != "403" {
		t.Fatalf("alice confirmed: %+v", e)
	}
	// A confirmation names the dispatch it is about: the parked one's
	// Result.Ref. One about another dispatch, or none, would be dropped, so
	// it is refused.
	for _, ref := range []string{"", "tx-other"} {
		if e := b.call(t, "oracle", "confirm", authz.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmFailed, Ref: ref}, nil); e == nil || e.Code != "409" {
			t.Fatalf("oracle confirmed dispatch %q: %+v, want 409", ref, e)
		}
	}
	if e := b.call(t, "oracle", "confirm", authz.ConfirmRequest{ID: id, Index: 0, Content: pipeline.ConfirmIncluded, Ref: "tx-s1"}, nil); e != nil {
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
		return len(s) == 1 && s[0].State == authz.SenderFree
	})
}
