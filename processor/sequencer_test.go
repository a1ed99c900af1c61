package processor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/senderlease"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

const typeDispatch = "chain.dispatch"

// dispatcher is a handler that dispatches a transaction per call, as the
// sequencer's workers do, and polls for its inclusion: what a poll answers
// is up to the test (verdict), per dispatch reference.
type dispatcher struct {
	mu         sync.Mutex
	dispatches map[uint64][]int // attempts per batch, in order
	senders    map[uint64][]string
	secrets    map[uint64]string
	polls      map[uint64]int
	success    map[uint64]int
	failure    map[uint64]int
	failures   map[uint64]pipeline.Failure
	// included lists, per batch, the dispatch each success hook was called for.
	included map[uint64][]string
	seen     map[uint64]string // the sender of any handler's call, per batch
	// verdict answers a poll of ref (included, failed); nil: not yet.
	verdict func(id uint64, attempt int, ref string) (bool, error)
}

func newDispatcher() *dispatcher {
	return &dispatcher{
		dispatches: map[uint64][]int{}, senders: map[uint64][]string{}, secrets: map[uint64]string{},
		seen: map[uint64]string{}, polls: map[uint64]int{}, success: map[uint64]int{}, failure: map[uint64]int{}, failures: map[uint64]pipeline.Failure{},
		included: map[uint64][]string{},
	}
}

func (d *dispatcher) Handle(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	secret := ""
	if call.SenderSecret != nil {
		s, err := call.SenderSecret()
		if err != nil {
			return pipeline.Result{}, pipeline.Permanent(err)
		}
		secret = string(s)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dispatches[call.BatchID] = append(d.dispatches[call.BatchID], call.Attempt)
	d.senders[call.BatchID] = append(d.senders[call.BatchID], call.Sender)
	d.secrets[call.BatchID] = secret
	// The fee rises with the attempt, as the sequencer's dispatchers do.
	return pipeline.Result{Data: pipeline.MustPayload(map[string]int{"fee": 100 * call.Attempt}), Ref: fmt.Sprintf("tx-%d-%d", call.BatchID, call.Attempt)}, nil
}

func (d *dispatcher) Poll(_ context.Context, call *pipeline.Call, ref string) (bool, error) {
	d.mu.Lock()
	d.polls[call.BatchID]++
	v := d.verdict
	d.mu.Unlock()
	if v == nil {
		return false, nil
	}
	var attempt int
	if _, err := fmt.Sscanf(ref, fmt.Sprintf("tx-%d-%%d", call.BatchID), &attempt); err != nil {
		return false, pipeline.Permanent(fmt.Errorf("unknown ref %q", ref))
	}
	return v(call.BatchID, attempt, ref)
}

func (d *dispatcher) OnSuccess(_ context.Context, call *pipeline.Call, res pipeline.Result) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.success[call.BatchID]++
	d.included[call.BatchID] = append(d.included[call.BatchID], res.Ref)
	return nil
}

func (d *dispatcher) OnFailure(_ context.Context, call *pipeline.Call, f pipeline.Failure) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failure[call.BatchID]++
	d.failures[call.BatchID] = f
	return nil
}

func (d *dispatcher) setVerdict(v func(id uint64, attempt int, ref string) (bool, error)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.verdict = v
}

// counts returns the dispatches, polls, success and failure hook calls of batch id.
func (d *dispatcher) counts(id uint64) (attempts []int, polls, success, failure int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]int(nil), d.dispatches[id]...), d.polls[id], d.success[id], d.failure[id]
}

func (d *dispatcher) senderOf(id uint64) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s := d.senders[id]; len(s) > 0 {
		return s[len(s)-1]
	}
	return ""
}

// setupSequencer is setup with the dispatcher registered, and a worker that
// holds secret references for senders s1 and s2.
func setupSequencer(t *testing.T) (*bundle, *dispatcher) {
	t.Helper()
	b := newBundle(handlers.NewLedger(map[string]int64{"alice": 100}, opsLabel))
	d := newDispatcher()
	b.mux.Use(func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
			d.mu.Lock()
			d.seen[call.BatchID] = call.Sender
			d.mu.Unlock()
			return next.Handle(ctx, call)
		})
	})
	handlers.Register(b.mux, b.ledger, nil)
	b.mux.Register(typeDispatch, d)
	t.Setenv("TEST_SENDER_S1", "secret-one")
	t.Setenv("TEST_SENDER_S2", "secret-two")
	b.start(t, worker.Options{Senders: map[string]map[string]string{
		domain: {"s1": "env:TEST_SENDER_S1", "s2": "env:TEST_SENDER_S2"},
	}})
	return b, d
}

// dispatch is a function that needs a sender and waits for inclusion.
func dispatch(poll, maxWait time.Duration, times int) pipeline.Function {
	f := pipeline.Function{Type: typeDispatch, Sender: true,
		Inclusion: &pipeline.Inclusion{PollEvery: pipeline.Duration(poll), MaxWait: pipeline.Duration(maxWait)}}
	if times > 0 {
		f.Retry = retry(times, 10*time.Millisecond)
	}
	return f
}

func (b *bundle) enqueueKeyed(t *testing.T, key string, fns ...pipeline.Function) uint64 {
	t.Helper()
	return b.enqueue(t, pipeline.Batch{Key: key, Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: fns})
}

// pool reads the domain's sender pool.
func (b *bundle) pool(t *testing.T) records.SenderPool {
	t.Helper()
	kv, err := b.admin.KeyValue(b.ctx, streams.BucketSenders)
	if err != nil {
		t.Fatal(err)
	}
	p, err := senderlease.Load(b.ctx, kv, domain)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// leases maps batch ids to the senders they hold.
func (b *bundle) leases(t *testing.T) map[uint64]string {
	t.Helper()
	out := map[uint64]string{}
	for _, s := range b.pool(t).Senders {
		if !s.Free() {
			if prev, dup := out[s.Batch]; dup {
				t.Fatalf("batch %d holds two senders: %s and %s", s.Batch, prev, s.Name)
			}
			out[s.Batch] = s.Name
		}
	}
	return out
}

func parked(t *testing.T, b *bundle, id uint64) bool {
	t.Helper()
	pr, ok := b.tryProgress(t, id)
	return ok && pr.State == records.Parked
}

func TestSenderExhaustionDelaysAThirdKey(t *testing.T) {
	b, d := setupSequencer(t)
	// One submitter sends all three: its share is the whole pool here, so
	// the pool itself runs out.
	p := b.processor(t, processor.Options{Senders: []string{"s1", "s2"}, SenderShare: 2, SenderWait: 50 * time.Millisecond})
	included := map[uint64]bool{}
	var mu sync.Mutex
	d.setVerdict(func(id uint64, _ int, _ string) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return included[id], nil
	})
	ids := []uint64{
		b.enqueueKeyed(t, "k1", dispatch(20*time.Millisecond, time.Minute, 0)),
		b.enqueueKeyed(t, "k2", dispatch(20*time.Millisecond, time.Minute, 0)),
		b.enqueueKeyed(t, "k3", dispatch(20*time.Millisecond, time.Minute, 0)),
	}
	testnats.Eventually(t, 10*time.Second, "two batches parked with a sender each", func() bool {
		p.Tick(b.ctx, 8)
		n := 0
		for _, id := range ids {
			if parked(t, b, id) {
				n++
			}
		}
		return n == 2
	})
	// Whichever two came first hold the senders; the other is the third.
	for i, id := range ids {
		if !parked(t, b, id) {
			ids[i], ids[2] = ids[2], id
		}
	}
	// The third key waits: set aside, never dispatched, holding nothing,
	// while the two holders poll on undisturbed.
	testnats.Eventually(t, 10*time.Second, "both holders polled while the third waits", func() bool {
		p.Tick(b.ctx, 8)
		_, p0, _, _ := d.counts(ids[0])
		_, p1, _, _ := d.counts(ids[1])
		return p0 > 1 && p1 > 1
	})
	if a, _, _, _ := d.counts(ids[2]); len(a) != 0 {
		t.Fatalf("third batch dispatched %v with every sender leased", a)
	}
	l := b.leases(t)
	if len(l) != 2 || l[ids[0]] == l[ids[1]] || l[ids[0]] == "" || l[ids[1]] == "" {
		t.Fatalf("leases %v, want one sender each for batches %d and %d", l, ids[0], ids[1])
	}
	for i, id := range ids[:2] {
		if got := d.senderOf(id); got != l[id] {
			t.Fatalf("batch %d dispatched with sender %q, holds %q", id, got, l[id])
		}
		want := map[string]string{"s1": "secret-one", "s2": "secret-two"}[l[id]]
		d.mu.Lock()
		secret := d.secrets[id]
		d.mu.Unlock()
		if secret != want {
			t.Fatalf("batch %d (#%d) resolved secret %q, want %q", id, i, secret, want)
		}
	}
	freed := l[ids[0]]
	mu.Lock()
	included[ids[0]] = true
	mu.Unlock()
	if cb := b.outcome(t, p, ids[0]); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("first batch: %s", cb.Outcome)
	}
	testnats.Eventually(t, 10*time.Second, "third batch dispatched with the freed sender", func() bool {
		p.Tick(b.ctx, 8)
		return parked(t, b, ids[2])
	})
	if got := d.senderOf(ids[2]); got != freed {
		t.Fatalf("third batch got sender %q, want the freed %q", got, freed)
	}
	if l := b.leases(t); len(l) != 2 || l[ids[2]] != freed {
		t.Fatalf("leases %v after the release", l)
	}
}

func TestSenderReleasedOnEveryOutcome(t *testing.T) {
	tests := []struct {
		name   string
		batch  func() pipeline.Batch
		status pipeline.Status
	}{
		{name: "executed", status: pipeline.Executed, batch: func() pipeline.Batch {
			f := noop()
			f.Sender = true
			return pipeline.Batch{Key: "k", Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{f, noop()}}
		}},
		{name: "failed", status: pipeline.Rejected, batch: func() pipeline.Batch {
			return pipeline.Batch{Key: "k", Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{dispatch(10*time.Millisecond, 200*time.Millisecond, 0)}}
		}},
		{name: "atomic failed", status: pipeline.Rejected, batch: func() pipeline.Batch {
			f := fn(handlers.TypeFail, handlers.FailArgs{})
			f.Sender = true
			return pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic}, Functions: []pipeline.Function{f}}
		}},
		// Expiry waits for the dispatch to be settled (here: not included
		// within its maximum wait), then ends the batch at its next step.
		{name: "expired while waiting for inclusion", status: pipeline.Expired, batch: func() pipeline.Batch {
			return pipeline.Batch{Key: "k", ExpiresAt: time.Now().Add(300 * time.Millisecond), Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
				Functions: []pipeline.Function{dispatch(20*time.Millisecond, 1500*time.Millisecond, 3)}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, d := setupSequencer(t)
			p := b.processor(t, processor.Options{Senders: []string{"s1"}})
			id := b.enqueue(t, tt.batch())
			if cb := b.outcome(t, p, id); cb.Outcome.Status != tt.status {
				t.Fatalf("outcome %s, want %s", cb.Outcome, tt.status)
			}
			d.mu.Lock()
			seen := d.seen[id]
			d.mu.Unlock()
			if seen != "s1" {
				t.Fatalf("the batch's call had sender %q, want s1", seen)
			}
			if l := b.leases(t); len(l) != 0 {
				t.Fatalf("leases %v after the batch finished", l)
			}
		})
	}
}

func TestBatchNeedingASenderWithoutPoolFails(t *testing.T) {
	b, d := setupSequencer(t)
	p := b.processor(t, processor.Options{})
	id := b.enqueueKeyed(t, "k", dispatch(10*time.Millisecond, time.Minute, 3))
	cb := b.outcome(t, p, id)
	if cb.Outcome.Status != pipeline.Rejected {
		t.Fatalf("outcome %s, want rejected", cb.Outcome)
	}
	if a, _, _, _ := d.counts(id); len(a) != 0 {
		t.Fatalf("dispatched %v without a sender", a)
	}
}

func TestInclusion(t *testing.T) {
	tests := []struct {
		name    string
		fn      pipeline.Function
		verdict func(id uint64, attempt int, ref string) (bool, error)
		// confirm, when set, is published as an outside confirmation once parked.
		confirm      string
		status       pipeline.Status
		attempts     []int
		success      int
		failure      int
		failedReason string
	}{
		{name: "polled: included", fn: dispatch(10*time.Millisecond, time.Minute, 0), status: pipeline.Executed, attempts: []int{1}, success: 1,
			verdict: func(_ uint64, _ int, _ string) (bool, error) { return true, nil }},
		{name: "confirmed from outside", fn: dispatch(0, time.Minute, 0), confirm: pipeline.ConfirmIncluded, status: pipeline.Executed, attempts: []int{1}, success: 1},
		{name: "outside failure, then included on the retry", fn: dispatch(0, time.Minute, 1), confirm: pipeline.ConfirmFailed + ": reverted", status: pipeline.Executed, attempts: []int{1, 2}, success: 1},
		{name: "poll says failed, the retry raises the fee and is included", fn: dispatch(10*time.Millisecond, time.Minute, 2), status: pipeline.Executed, attempts: []int{1, 2}, success: 1,
			verdict: func(_ uint64, attempt int, _ string) (bool, error) {
				if attempt == 1 {
					return false, errors.New("fee too low")
				}
				return true, nil
			}},
		{name: "never included: retried, then failed", fn: dispatch(20*time.Millisecond, 150*time.Millisecond, 2), status: pipeline.Rejected, attempts: []int{1, 2, 3}, failure: 1,
			failedReason: "not included within 150ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, d := setupSequencer(t)
			d.setVerdict(tt.verdict)
			p := b.processor(t, processor.Options{Senders: []string{"s1"}})
			runProcessor(t, b, p)
			id := b.enqueueKeyed(t, "k", tt.fn, noop())
			if tt.confirm != "" {
				testnats.Eventually(t, 10*time.Second, "batch parked", func() bool {
					p.Tick(b.ctx, 1)
					return parked(t, b, id)
				})
				confirmDispatch(t, b, id, tt.confirm, 1)
				if tt.status == pipeline.Executed && len(tt.attempts) > 1 {
					testnats.Eventually(t, 10*time.Second, "batch parked again", func() bool {
						p.Tick(b.ctx, 1)
						a, _, _, _ := d.counts(id)
						return len(a) == 2 && parked(t, b, id)
					})
					confirmDispatch(t, b, id, pipeline.ConfirmIncluded, 2)
				}
			}
			cb := b.outcome(t, p, id)
			if cb.Outcome.Status != tt.status {
				t.Fatalf("outcome %s, want %s", cb.Outcome, tt.status)
			}
			// Ticks after the end call nothing more.
			p.Tick(b.ctx, 8)
			attempts, _, success, failure := d.counts(id)
			if fmt.Sprint(attempts) != fmt.Sprint(tt.attempts) {
				t.Fatalf("dispatch attempts %v, want %v", attempts, tt.attempts)
			}
			if success != tt.success || failure != tt.failure {
				t.Fatalf("success hook %d, failure hook %d; want %d and %d", success, failure, tt.success, tt.failure)
			}
			if tt.failedReason != "" {
				d.mu.Lock()
				f := d.failures[id]
				d.mu.Unlock()
				if !f.Exhausted || f.Failures != len(tt.attempts) || !contains(f.LastError, tt.failedReason) {
					t.Fatalf("failure hook got %+v", f)
				}
			}
			if l := b.leases(t); len(l) != 0 {
				t.Fatalf("leases %v after the batch finished", l)
			}
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// A processor that dies while a batch waits for inclusion (or right after
// its dispatch, before it wrote anything) is replaced by one that finds
// the batch's progress and lease and polls on: the transaction is
// dispatched once.
func TestInclusionSurvivesAProcessorDeath(t *testing.T) {
	for _, tt := range []struct {
		name  string
		fault string
	}{
		{name: "stopped while waiting"},
		{name: "killed between dispatch and progress", fault: processor.FaultAfterWork},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, d := setupSequencer(t)
			gate := make(chan struct{})
			d.setVerdict(func(uint64, int, string) (bool, error) {
				select {
				case <-gate:
					return true, nil
				default:
					return false, nil
				}
			})
			opts := processor.Options{Name: "first", Senders: []string{"s1", "s2"}}
			if tt.fault != "" {
				opts = processor.WithFault(opts, func(point string) error {
					if point == tt.fault {
						return errors.New("killed")
					}
					return nil
				})
			}
			ctx, cancel := context.WithCancel(b.ctx)
			first, err := processor.New(ctx, b.env.Conn(t, "processor"), withDomain(opts))
			if err != nil {
				t.Fatal(err)
			}
			id := b.enqueueKeyed(t, "k", dispatch(20*time.Millisecond, time.Minute, 2))
			testnats.Eventually(t, 10*time.Second, "dispatched by the first processor", func() bool {
				first.Tick(ctx, 1)
				a, _, _, _ := d.counts(id)
				return len(a) == 1
			})
			held := b.leases(t)[id]
			if held == "" {
				t.Fatal("no lease after the dispatch")
			}
			cancel() // the first processor is gone

			second := b.processor(t, processor.Options{Name: "second", Senders: []string{"s1", "s2"}})
			testnats.Eventually(t, 10*time.Second, "the second processor waits for inclusion", func() bool {
				second.Tick(b.ctx, 1)
				_, polls, _, _ := d.counts(id)
				return parked(t, b, id) && polls > 0
			})
			close(gate)
			if cb := b.outcome(t, second, id); cb.Outcome.Status != pipeline.Executed {
				t.Fatalf("outcome %s", cb.Outcome)
			}
			attempts, _, success, _ := d.counts(id)
			if len(attempts) != 1 || success != 1 {
				t.Fatalf("dispatched %v, success hook %d; want one dispatch and one hook", attempts, success)
			}
			if got := d.senderOf(id); got != held {
				t.Fatalf("sender %q, want the one leased before the death %q", got, held)
			}
			if l := b.leases(t); len(l) != 0 {
				t.Fatalf("leases %v after the batch finished", l)
			}
		})
	}
}

func withDomain(o processor.Options) processor.Options {
	o.Domain = domain
	o.WorkTimeout = 5 * time.Second
	return o
}

// TestExpiryWaitsForTheDispatch: a batch whose expiry passes while its
// dispatch waits for inclusion keeps waiting, its sender leased, until the
// dispatch is settled: here it lands, the success hook runs once and the
// batch ends Executed (what it dispatched took effect).
func TestExpiryWaitsForTheDispatch(t *testing.T) {
	b, d := setupSequencer(t)
	var land atomic.Bool
	d.setVerdict(func(uint64, int, string) (bool, error) { return land.Load(), nil })
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	p := b.processor(t, processor.Options{Senders: []string{"s1"}, Now: now})
	id := b.enqueue(t, pipeline.Batch{Key: "k", ExpiresAt: now().Add(time.Minute), Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions: []pipeline.Function{dispatch(20*time.Millisecond, time.Hour, 0)}})
	testnats.Eventually(t, 10*time.Second, "parked for inclusion", func() bool {
		p.Tick(b.ctx, 4)
		return parked(t, b, id)
	})
	clock.Add(int64(2 * time.Minute)) // past the expiry, well within the wait
	_, before, _, _ := d.counts(id)
	testnats.Eventually(t, 10*time.Second, "polled after the expiry", func() bool {
		p.Tick(b.ctx, 4)
		_, polls, _, _ := d.counts(id)
		return polls >= before+2
	})
	if !parked(t, b, id) {
		t.Fatal("the batch ended while its dispatch waited for inclusion")
	}
	if l := b.leases(t); l[id] != "s1" {
		t.Fatalf("leases %v: the waiting dispatch's sender was released", l)
	}
	land.Store(true)
	if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s, want Executed", cb.Outcome)
	}
	if attempts, _, success, failure := d.counts(id); len(attempts) != 1 || success != 1 || failure != 0 {
		t.Fatalf("dispatches %v, success hooks %d, failure hooks %d; want one of each but no failure", attempts, success, failure)
	}
	if l := b.leases(t); len(l) != 0 {
		t.Fatalf("leases %v after the batch finished", l)
	}
}
