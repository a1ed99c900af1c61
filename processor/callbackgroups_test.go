package processor_test

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// callbackMessages reads the messages of CALLBACKS: how many, and how
// many of them are groups.
func (b *bundle) callbackMessages(t *testing.T) (msgs, groups int) {
	t.Helper()
	s, err := b.admin.Stream(b.ctx, streams.StreamCallbacks)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(b.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		msgs++
		if m.Header.Get(streams.HeaderKind) == streams.KindCallbacks {
			groups++
			n, err := strconv.Atoi(m.Header.Get(streams.HeaderCount))
			if err != nil || n < 2 || n > records.CallbackGroupMax {
				t.Fatalf("group at %d counts %q callbacks", seq, m.Header.Get(streams.HeaderCount))
			}
		}
	}
	return msgs, groups
}

// TestCallbacksTravelInGroups: batches that finish together send their
// callbacks in fewer messages than batches, none larger than
// records.CallbackGroupMax, and every batch has its one callback; every
// token is acknowledged.
func TestCallbacksTravelInGroups(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{Concurrency: 128, MaxSteps: 256})
	const n = 200
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	}
	done := 0
	testnats.Eventually(t, 20*time.Second, "every batch stepped", func() bool {
		for _, s := range p.Tick(b.ctx, n).Steps {
			if s.Action != api.ActionFinished {
				t.Fatalf("step %+v, want finished", s)
			}
			done++
		}
		return done == n
	})
	testnats.Eventually(t, 5*time.Second, "every token acknowledged", func() bool { return b.queued(t) == 0 })
	cbs := b.callbacks(t)
	for _, id := range ids {
		if len(cbs[id]) != 1 || cbs[id][0].Outcome.Status != pipeline.Executed {
			t.Fatalf("batch %d: callbacks %+v, want one Executed", id, cbs[id])
		}
	}
	msgs, groups := b.callbackMessages(t)
	if msgs >= n || groups == 0 {
		t.Fatalf("%d batches finished together sent %d callback messages (%d groups), want fewer messages than batches", n, msgs, groups)
	}
	t.Logf("%d callbacks in %d messages (%d groups)", n, msgs, groups)
}

// tableOps lets authz apply the callbacks of the batches these tests
// enqueue (label ops of domain pay).
const tableOps = `
labels:
  ops:
    domain: pay
    users: ["*"]
    mode: atomic
    priority: med
    functions:
      noop: {}
`

// TestCrashAfterCallbackGroupStored: the processor dies after a message of
// callbacks (a group) is stored and before its members' tokens are
// acknowledged. A successor steps the batches again and publishes their
// callbacks again, which a group cannot deduplicate; authz applies each
// batch's outcome once (its record shows one application), and every
// callback of a batch agrees.
func TestCrashAfterCallbackGroupStored(t *testing.T) {
	mux := pipeline.NewServeMux()
	calls := testsystem.Count(mux)
	handlers.Register(mux, handlers.NewLedger(nil, opsLabel), nil)
	sys := testsystem.Start(t, tableOps, testsystem.Options{
		Domains: []string{domain},
		NATS: []testnats.Option{testnats.WithSettings(func(s *streams.Settings) {
			s.AckWait = time.Second
		})},
		Handlers: mux, Worker: worker.Options{},
	})
	testnats.KeepCallbacks(t, sys.Admin)
	b := &bundle{System: sys, env: sys.Env, ctx: sys.Ctx, authz: sys.AuthzJS, admin: sys.Admin}
	var crashed atomic.Int32
	crashing := atomic.Bool{}
	crashing.Store(true)
	nc := b.env.Conn(t, "processor")
	doomed, err := processor.New(b.ctx, nc, processor.WithFault(processor.Options{Domain: domain, Name: "doomed", Concurrency: 64, Pace: processor.PaceTick}, func(point string) error {
		if point == processor.FaultAfterCallbackGroup && crashing.Load() {
			crashed.Add(1)
			return errors.New("killed")
		}
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	}
	testnats.Eventually(t, 10*time.Second, "the doomed processor steps every batch", func() bool {
		doomed.Tick(b.ctx, n)
		return len(b.callbacks(t)) == n
	})
	crashing.Store(false)
	nc.Close() // the process is gone; its tokens come back
	if _, groups := b.callbackMessages(t); groups == 0 || crashed.Load() == 0 {
		t.Fatalf("%d crashes, %d groups stored: the crash point was not reached with a group", crashed.Load(), groups)
	}
	successor := b.processor(t, processor.Options{Name: "successor", Concurrency: 64})
	for _, id := range ids {
		if rec := b.Settled(t, successor, id); rec.Status != pipeline.Executed {
			t.Fatalf("batch %d: %s", id, rec.Status)
		}
	}
	testnats.Eventually(t, 10*time.Second, "queues drained", func() bool {
		successor.Tick(b.ctx, n)
		return b.queued(t) == 0
	})
	testnats.Eventually(t, 10*time.Second, "every callback applied", func() bool {
		c, err := b.admin.Consumer(b.ctx, streams.StreamCallbacks, streams.CallbacksConsumer)
		if err != nil {
			return false
		}
		info, err := c.Info(b.ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	})
	cbs := b.callbacks(t)
	again := 0
	for _, id := range ids {
		if len(cbs[id]) == 0 {
			t.Fatalf("batch %d has no callback", id)
		}
		again += len(cbs[id]) - 1
		for _, cb := range cbs[id] {
			if cb.Outcome.Status != pipeline.Executed {
				t.Fatalf("batch %d: callbacks %+v disagree", id, cbs[id])
			}
		}
		rec := b.Record(t, id)
		applied := 0
		for _, ev := range rec.History {
			if ev.What == records.EventCallback {
				applied++
			}
		}
		if applied != 1 {
			t.Fatalf("batch %d: outcome applied %d times: %+v", id, applied, rec.History)
		}
		if got := calls.Get(key(id, 0)); got != 1 {
			t.Fatalf("batch %d: its function ran %d times", id, got)
		}
	}
	if again == 0 {
		t.Fatal("no callback was published again: the crash left every token acknowledged")
	}
	t.Logf("%d crashes; %d callbacks published again", crashed.Load(), again)
}

// TestRepeatedTokenPublishesItsCallbackAlone: second copies of finished
// batches' tokens (a queue edit's, or a server's that lost its consumer's
// state) are stepped while other batches finish in groups; a repeat's
// callback goes alone, deduplicated by the batch id, so each batch keeps
// one callback.
func TestRepeatedTokenPublishesItsCallbackAlone(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{Concurrency: 128})
	const n = 30
	var done []pipeline.Batch
	for range n {
		bt := pipeline.Batch{Label: opsLabel, Domain: domain, Priority: pipeline.Med,
			Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic}, Functions: []pipeline.Function{noop()}}
		b.Enqueue(t, &bt)
		// One at a time: each callback goes alone.
		if sr := step(t, b.ctx, p); sr.BatchID != bt.ID || sr.Action != api.ActionFinished {
			t.Fatalf("step %+v", sr)
		}
		done = append(done, bt)
	}
	var others []uint64
	for range 2 * n {
		others = append(others, b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}}))
	}
	for i := range done {
		again, err := streams.TokenMsg(streams.TokenSubject(done[i].Priority, done[i].Domain), &done[i], 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		again.Header.Del(nats.MsgIdHdr) // a copy, not the same publish again
		if _, err := b.authz.PublishMsg(b.ctx, again); err != nil {
			t.Fatal(err)
		}
	}
	testnats.Eventually(t, 10*time.Second, "every token stepped", func() bool {
		p.Tick(b.ctx, 3*n)
		return b.queued(t) == 0
	})
	cbs := b.callbacks(t)
	for _, bt := range done {
		if len(cbs[bt.ID]) != 1 {
			t.Fatalf("batch %d: %d callbacks, want 1", bt.ID, len(cbs[bt.ID]))
		}
	}
	for _, o := range others {
		if len(cbs[o]) != 1 {
			t.Fatalf("batch %d: %d callbacks, want 1", o, len(cbs[o]))
		}
	}
	if _, groups := b.callbackMessages(t); groups == 0 {
		t.Fatal("no group: the repeats were not stepped among batches finishing together")
	}
}
