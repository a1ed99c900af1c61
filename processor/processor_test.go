package processor_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/testnats"

	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

func TestHighBeforeMed(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	med1 := b.enqueue(t, pipeline.Batch{Priority: pipeline.Med, Functions: []pipeline.Function{noop()}})
	med2 := b.enqueue(t, pipeline.Batch{Priority: pipeline.Med, Functions: []pipeline.Function{noop()}})
	high := b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
	// Counted by their consumers first: a token's PubAck comes before its
	// consumer counts it, and a tick that asks in between finds HIGH
	// empty (on a loaded machine, long enough for MED to go first).
	b.pending(t, pipeline.High, 1)
	b.pending(t, pipeline.Med, 2)
	var order []uint64
	for range 3 {
		order = append(order, step(t, b.ctx, p).BatchID)
	}
	if want := []uint64{high, med1, med2}; !equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if rep := p.Tick(b.ctx, 1); rep.Status != api.TickNoMessages {
		t.Fatalf("empty queues: status %q", rep.Status)
	}
}

// A HIGH queue slow to answer (its fetch falls silent, though its
// consumer is not full) does not let MED overtake it: the tick takes
// nothing from MED. Once HIGH answers again, both run.
func TestSlowHighQueueHoldsMedBack(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	med := b.enqueue(t, pipeline.Batch{Priority: pipeline.Med, Functions: []pipeline.Function{noop()}})
	high := b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
	b.pending(t, pipeline.High, 1)
	b.pending(t, pipeline.Med, 1)
	// A fetch request nobody answers: the server's answer never comes,
	// whatever the timing (a subscriber on the subject keeps the server
	// from answering "no responders").
	const silent = "silent"
	nc := b.env.Conn(t, "admin")
	sub, err := nc.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT." + streams.QueueStream(pipeline.High) + "." + silent)
	if err != nil {
		t.Fatal(err)
	}
	// Known to the server before the tick asks: a fetch that came first
	// would be answered "no responders", a failure rather than silence,
	// and MED would not wait.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	processor.SetFetchSilence(p, pipeline.High, silent, 20*time.Millisecond)
	if rep := p.Tick(b.ctx, 1); len(rep.Steps) != 0 {
		t.Fatalf("with HIGH silent but not full, the tick ran %+v", rep.Steps)
	}
	if _, err := sub.NextMsg(time.Second); err != nil {
		t.Fatalf("the tick asked HIGH nothing: %v", err)
	}
	processor.SetFetchSilence(p, pipeline.High, "", 0)
	ran := map[uint64]bool{}
	for range 2 {
		ran[step(t, b.ctx, p).BatchID] = true
	}
	if !ran[high] || !ran[med] {
		t.Fatalf("ran %v, want %d and %d", ran, high, med)
	}
}

func equal(a, b []uint64) bool { return slices.Equal(a, b) }

func TestAtomicAllOrNothing(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	// The second transfer cannot be covered: the first one must be undone.
	bad := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{
		fn(handlers.TypeTransfer, handlers.Transfer{From: "alice", To: "bob", Amount: 30}),
		fn(handlers.TypeTransfer, handlers.Transfer{From: "bob", To: "carol", Amount: 50}),
	}})
	cb := b.outcome(t, p, bad)
	if cb.Outcome.Status != pipeline.Rejected {
		t.Fatalf("outcome %s, want Rejected", cb.Outcome)
	}
	if a, bo, c := b.ledger.Balance("alice"), b.ledger.Balance("bob"), b.ledger.Balance("carol"); a != 100 || bo != 0 || c != 0 {
		t.Fatalf("balances after rollback: alice %d bob %d carol %d, want 100 0 0", a, bo, c)
	}
	good := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{
		fn(handlers.TypeTransfer, handlers.Transfer{From: "alice", To: "bob", Amount: 30}),
		fn(handlers.TypeTransfer, handlers.Transfer{From: "bob", To: "carol", Amount: 20}),
	}})
	if cb := b.outcome(t, p, good); cb.Outcome.Status != pipeline.Executed || cb.Outcome.Executed != 2 {
		t.Fatalf("outcome %s, want Executed", cb.Outcome)
	}
	if a, bo, c := b.ledger.Balance("alice"), b.ledger.Balance("bob"), b.ledger.Balance("carol"); a != 70 || bo != 10 || c != 20 {
		t.Fatalf("balances: alice %d bob %d carol %d, want 70 10 20", a, bo, c)
	}
	dls := b.deadLetters(t)
	if len(dls) != 1 || dls[0].Batch.ID != bad || dls[0].Index != -1 || dls[0].Error == "" || dls[0].Origin.Stream != streams.StreamMed {
		t.Fatalf("dead letters: %+v", dls)
	}
}

func TestAtomicRetry(t *testing.T) {
	tests := []struct {
		name         string
		failAttempts int
		times        int
		want         pipeline.Status
		wantAttempts int
	}{
		{name: "succeeds on the third attempt", failAttempts: 2, times: 3, want: pipeline.Executed, wantAttempts: 3},
		{name: "exhausted after 1+times attempts", failAttempts: 10, times: 2, want: pipeline.Rejected, wantAttempts: 3},
		{name: "no retry logic means one attempt", failAttempts: 10, times: -2, want: pipeline.Rejected, wantAttempts: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			p := b.processor(t, processor.Options{})
			bt := pipeline.Batch{Functions: []pipeline.Function{fn(handlers.TypeFlaky, handlers.FlakyArgs{FailAttempts: tt.failAttempts})}}
			if tt.times >= 0 {
				bt.Subroutine.Retry = retry(tt.times, 20*time.Millisecond)
			}
			id := b.enqueue(t, bt)
			cb := b.outcome(t, p, id)
			if cb.Outcome.Status != tt.want {
				t.Fatalf("outcome %s, want %s", cb.Outcome, tt.want)
			}
			if got := b.calls.get(key(id, 0)); got != tt.wantAttempts {
				t.Fatalf("handler ran %d times, want %d", got, tt.wantAttempts)
			}
			if cb.Attempts != tt.wantAttempts {
				t.Fatalf("callback attempts %d, want %d", cb.Attempts, tt.wantAttempts)
			}
		})
	}
}

func TestRetryDelayDoesNotBlockOthers(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	slow := b.enqueue(t, pipeline.Batch{
		Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic, Retry: retry(1, time.Hour)},
		Functions:  []pipeline.Function{fn(handlers.TypeFlaky, handlers.FlakyArgs{FailAttempts: 1})},
	})
	next := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	if sr := step(t, b.ctx, p); sr.BatchID != slow || sr.Action != api.ActionRetry {
		t.Fatalf("first step: %+v", sr)
	}
	if cb := b.outcome(t, p, next); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("batch behind a waiting retry: %s", cb.Outcome)
	}
}

func TestNonAtomicFairRotation(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	x := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{noop(), noop(), noop()}})
	y := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{noop(), noop()}})
	var order []uint64
	for range 5 {
		order = append(order, step(t, b.ctx, p).BatchID)
	}
	// Each function waits for its turn behind the batches queued after it.
	if want := []uint64{x, y, x, y, x}; !equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	cbs := b.callbacks(t)
	for _, id := range []uint64{x, y} {
		if len(cbs[id]) != 1 || cbs[id][0].Outcome.Status != pipeline.Executed {
			t.Fatalf("batch %d callbacks: %+v", id, cbs[id])
		}
	}
	if cbs[x][0].Outcome.Executed != 3 {
		t.Fatalf("executed %d, want 3", cbs[x][0].Outcome.Executed)
	}
}

func TestNonAtomicFailure(t *testing.T) {
	tests := []struct {
		name      string
		functions []pipeline.Function
		want      pipeline.Outcome
		attempts  map[int]int
	}{
		{
			name: "partially executed after retries",
			functions: []pipeline.Function{noop(), noop(), {
				Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{}),
				Retry: retry(2, 10*time.Millisecond),
			}, noop()},
			want:     pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 2},
			attempts: map[int]int{0: 1, 1: 1, 2: 3, 3: 0},
		},
		{
			name:      "rejected when the first function fails",
			functions: []pipeline.Function{fn(handlers.TypeFail, handlers.FailArgs{}), noop()},
			want:      pipeline.Outcome{Status: pipeline.Rejected},
			attempts:  map[int]int{0: 1, 1: 0},
		},
		{
			name: "permanent error skips the remaining retries",
			functions: []pipeline.Function{noop(), {
				Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{Permanent: true}),
				Retry: retry(5, 10*time.Millisecond),
			}},
			want:     pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 1},
			attempts: map[int]int{1: 1},
		},
		{
			name: "excluded error code is not retried",
			functions: []pipeline.Function{{
				Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{Code: "card_declined"}),
				Retry: &pipeline.RetryLogic{Times: 5, Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(10 * time.Millisecond)}, NonRetryable: []string{"card_declined"}},
			}},
			want:     pipeline.Outcome{Status: pipeline.Rejected},
			attempts: map[int]int{0: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			p := b.processor(t, processor.Options{})
			id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: tt.functions})
			cb := b.outcome(t, p, id)
			if cb.Outcome.Status != tt.want.Status || cb.Outcome.Executed != tt.want.Executed {
				t.Fatalf("outcome %s, want %s", cb.Outcome, tt.want)
			}
			for i, n := range tt.attempts {
				if got := b.calls.get(key(id, i)); got != n {
					t.Errorf("function %d ran %d times, want %d", i, got, n)
				}
			}
			dls := b.deadLetters(t)
			if len(dls) != 1 || dls[0].Batch.ID != id || dls[0].Outcome.Status != tt.want.Status {
				t.Fatalf("dead letters %+v", dls)
			}
			if cb.DeadLetter == 0 {
				t.Fatal("callback does not point at its dead letter")
			}
		})
	}
}

func TestFallback(t *testing.T) {
	tests := []struct {
		name     string
		fallback bool
		want     pipeline.Status
		dlq      int
	}{
		{name: "fallback handles the failure", fallback: true, want: pipeline.Executed, dlq: 0},
		{name: "fallback fails too", fallback: false, want: pipeline.PartiallyExecuted, dlq: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			p := b.processor(t, processor.Options{})
			id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{noop(), {
				Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{Fallback: tt.fallback}),
				Retry: retry(1, 10*time.Millisecond),
			}}})
			cb := b.outcome(t, p, id)
			if cb.Outcome.Status != tt.want || cb.Fallback != tt.fallback {
				t.Fatalf("outcome %s fallback %v, want %s fallback %v", cb.Outcome, cb.Fallback, tt.want, tt.fallback)
			}
			if got := b.calls.get(key(id, 1)); got != 2 {
				t.Fatalf("handler ran %d times, want 2 (retries exhausted before the fallback)", got)
			}
			if got := len(b.deadLetters(t)); got != tt.dlq {
				t.Fatalf("dead letters %d, want %d", got, tt.dlq)
			}
			if tt.fallback {
				if pr := b.progress(t, id); len(pr.Fallbacks) != 1 || pr.Fallbacks[0] != 1 {
					t.Fatalf("fallback not recorded: %+v", pr)
				}
			}
		})
	}
}

func TestExpiry(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	id := b.enqueue(t, pipeline.Batch{ExpiresAt: time.Now().Add(-time.Second), Functions: []pipeline.Function{noop()}})
	cb := b.outcome(t, p, id)
	if cb.Outcome.Status != pipeline.Expired || cb.Outcome.Executed != 0 {
		t.Fatalf("outcome %s, want Expired(0)", cb.Outcome)
	}
	if b.calls.total() != 0 {
		t.Fatal("an expired batch was executed")
	}
}

func TestExpiryMidway(t *testing.T) {
	b := setup(t)
	now := time.Now()
	clock := func() time.Time { return now }
	p := b.processor(t, processor.Options{Now: clock})
	id := b.enqueue(t, pipeline.Batch{ExpiresAt: now.Add(time.Hour), Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{noop(), noop(), noop()}})
	step(t, b.ctx, p)
	now = now.Add(2 * time.Hour)
	cb := b.outcome(t, p, id)
	if cb.Outcome.Status != pipeline.Expired || cb.Outcome.Executed != 1 {
		t.Fatalf("outcome %s, want Expired(1)", cb.Outcome)
	}
}

// TestTimedOutCallThatCompleted: a handler that finishes after the
// processor gave up waiting is not run again: the retry finds it running,
// then its completion record; and the wait counts no attempt.
func TestTimedOutCallThatCompleted(t *testing.T) {
	b := setup(t)
	release := make(chan struct{})
	var once sync.Once
	b.mux.RegisterFunc("overrun", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		<-release // ignores its deadline
		return pipeline.Result{}, nil
	})
	b.startWorker(t, b.ctx) // a worker that serves the new type
	p := b.processor(t, processor.Options{WorkTimeout: 200 * time.Millisecond})
	id := b.enqueue(t, pipeline.Batch{
		Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions:  []pipeline.Function{{Type: "overrun", Retry: retry(5, 10*time.Millisecond)}},
	})
	var cb records.Callback
	testnats.Eventually(t, 20*time.Second, "callback", func() bool {
		rep := p.Tick(b.ctx, 1)
		for _, s := range rep.Steps {
			if s.Action == api.ActionBusy { // the first call timed out: let the handler finish
				once.Do(func() { close(release) })
			}
		}
		if cbs := b.callbacks(t)[id]; len(cbs) > 0 {
			cb = cbs[0]
			return true
		}
		return false
	})
	if cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s", cb.Outcome)
	}
	if n := b.calls.get(key(id, 0)); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	if cb.Attempts != 1 {
		t.Fatalf("callback attempts %d, want 1: waiting for the worker is no failed attempt", cb.Attempts)
	}
}

// TestTickPastAFullHighQueue: HIGH's consumer holding as many tokens as
// MaxAckPending lets it (parked batches hold theirs) leaves a fetch of
// HIGH unanswered while HIGH has more; a tick still runs MED's batches,
// without an error.
func TestTickPastAFullHighQueue(t *testing.T) {
	b := setup(t, func(s *streams.Settings) { s.MaxAckPending, s.AckWait = 1, time.Minute })
	b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
	// Another client holds HIGH's one token.
	c, err := b.admin.Consumer(b.ctx, streams.QueueStream(pipeline.High), streams.ProcessorConsumer(domain))
	if err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 5*time.Second, "HIGH's token held", func() bool {
		batch, err := c.FetchNoWait(1)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for range batch.Messages() {
			n++
		}
		return n == 1
	})
	b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
	var med []uint64
	for range 3 {
		med = append(med, b.enqueue(t, pipeline.Batch{Priority: pipeline.Med, Functions: []pipeline.Function{noop()}}))
	}
	p := b.processor(t, processor.Options{Concurrency: 1})
	done := map[uint64]bool{}
	testnats.Eventually(t, 20*time.Second, "MED's batches run", func() bool {
		rep := p.Tick(b.ctx, 8)
		if rep.Status == api.TickError {
			t.Fatalf("tick: %+v", rep)
		}
		for _, s := range rep.Steps {
			if s.Priority != pipeline.Med {
				t.Fatalf("a HIGH token was taken beyond MaxAckPending: %+v", s)
			}
			done[s.BatchID] = s.Action == api.ActionFinished
		}
		return len(done) == len(med)
	})
	for _, id := range med {
		if !done[id] {
			t.Fatalf("batch %d: not finished (%v)", id, done)
		}
	}
}

// TestCopyOfAFirstTokenRunsNothingTwice: a copy of a batch's first token
// published past the duplicate window (the repair loop after a PubAck
// that never came, a starting authz racing a send) after the batch failed
// at its first step: a failed run leaves no completion record to answer a
// second call, so the copy, marked Again as every republished first token
// is, reads the batch's progress on its first delivery, finds it done and
// runs nothing. The handler ran once, and the batch has one callback.
func TestCopyOfAFirstTokenRunsNothingTwice(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	bt := pipeline.Batch{Label: opsLabel, Domain: domain, Priority: pipeline.Med, Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic},
		Functions: []pipeline.Function{fn(handlers.TypeFail, handlers.FailArgs{Permanent: true})}}
	id := b.Enqueue(t, &bt)
	if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Rejected {
		t.Fatalf("outcome %s, want Rejected", cb.Outcome)
	}
	again, err := streams.FirstTokenAgainMsg(streams.TokenSubject(bt.Priority, bt.Domain), &bt)
	if err != nil {
		t.Fatal(err)
	}
	again.Header.Del(nats.MsgIdHdr) // stored as a copy past the window is
	if _, err := b.authz.PublishMsg(b.ctx, again); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "the copy stepped", func() bool {
		p.Tick(b.ctx, 8)
		return b.queued(t) == 0
	})
	if n := b.calls.get(key(id, 0)); n != 1 {
		t.Fatalf("the failing handler ran %d times, want once", n)
	}
	if cbs := b.callbacks(t)[id]; len(cbs) != 1 {
		t.Fatalf("%d callbacks, want 1", len(cbs))
	}
}
