package processor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
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
)

// readyProcessor binds a processor of the ready pace and runs it until the
// test ends.
func readyProcessor(t *testing.T, b *bundle, opts processor.Options) *processor.Processor {
	t.Helper()
	opts.Pace = processor.PaceReady
	p := b.processor(t, opts)
	runProcessor(t, b, p)
	return p
}

// idle waits until at least n processors of the domain wait on the
// server for work on the priority's queue (WaitWork's request is
// outstanding): the domain is idle and its replicas do not poll.
func (b *bundle) idle(t *testing.T, prio pipeline.Priority, n int) {
	t.Helper()
	testnats.Eventually(t, 10*time.Second, "processors waiting for work", func() bool {
		w, _, _ := b.waiting(t, prio)
		return w >= n
	})
}

// pending waits until the priority's consumer holds n tokens not yet
// delivered.
func (b *bundle) pending(t *testing.T, prio pipeline.Priority, n uint64) {
	t.Helper()
	testnats.Eventually(t, 10*time.Second, "tokens pending", func() bool {
		_, p, _ := b.waiting(t, prio)
		return p == n
	})
}

// TestReadyPaceRunsABatchSentToAnIdleDomain: a replica of the ready pace
// with nothing to do waits on the server, and a batch sent then runs to its
// callback without any tick.
func TestReadyPaceRunsABatchSentToAnIdleDomain(t *testing.T) {
	b := setup(t)
	readyProcessor(t, b, processor.Options{})
	b.idle(t, pipeline.Med, 1)
	ids := []uint64{
		b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}}),
		b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
			Functions: []pipeline.Function{noop(), noop(), noop()}}),
	}
	testnats.Eventually(t, 10*time.Second, "every callback, with no tick", func() bool {
		cbs := b.callbacks(t)
		return len(cbs[ids[0]]) > 0 && len(cbs[ids[1]]) > 0
	})
	for _, id := range ids {
		if cb := b.callbacks(t)[id][0]; cb.Outcome.Status != pipeline.Executed {
			t.Fatalf("batch %d: %s", id, cb.Outcome)
		}
	}
	// Idle again: back to waiting on the server.
	b.idle(t, pipeline.Med, 1)
}

// TestReadyPaceEveryReplicaTakesWork: two replicas of concurrency 2 hold
// four steps at once, which neither could alone.
func TestReadyPaceEveryReplicaTakesWork(t *testing.T) {
	b := setup(t)
	started := make(chan struct{}, 8)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	b.mux.RegisterFunc("held", func(ctx context.Context, _ *pipeline.Call) (pipeline.Result, error) {
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
		}
		return pipeline.Result{}, nil
	})
	b.startWorker(t, b.ctx)
	for _, name := range []string{"A", "B"} {
		readyProcessor(t, b, processor.Options{Name: name, Concurrency: 2})
	}
	var ids []uint64
	for range 4 {
		ids = append(ids, b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{{Type: "held"}}}))
	}
	for i := range 4 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d steps held at once, want 4 (2 per replica)", i)
		}
	}
	free()
	testnats.Eventually(t, 10*time.Second, "every callback", func() bool {
		cbs := b.callbacks(t)
		return !slices.ContainsFunc(ids, func(id uint64) bool { return len(cbs[id]) == 0 })
	})
}

// TestReadyPacePauseStopsTheLoop: a replica of the ready pace stops taking
// steps once the domain is paused (the step in progress ends), reports
// paused to a tick, and goes on when resumed.
func TestReadyPacePauseStopsTheLoop(t *testing.T) {
	b := setup(t)
	started := make(chan string, 8)
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free)
	b.mux.RegisterFunc("held", func(ctx context.Context, c *pipeline.Call) (pipeline.Result, error) {
		started <- c.IdempotencyKey()
		select {
		case <-release:
		case <-ctx.Done():
		}
		return pipeline.Result{}, nil
	})
	b.startWorker(t, b.ctx)
	var logs testnats.LogBuffer
	readyProcessor(t, b, processor.Options{Concurrency: 1, Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	first := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{{Type: "held"}}})
	second := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{{Type: "held"}}})
	select {
	case k := <-started:
		if k != key(first, 0) {
			t.Fatalf("first step %s, want %s", k, key(first, 0))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no step started")
	}
	set := func(paused bool) { b.setPaused(t, paused) }
	set(true)
	free()
	testnats.Eventually(t, 10*time.Second, "the loop to see the pause", func() bool {
		return strings.Contains(logs.String(), "domain paused; the ready pace waits")
	})
	if len(b.callbacks(t)[first]) == 0 {
		t.Fatal("the step in progress at the pause did not end")
	}
	if n := runsOf(b, second, 0); n != 0 {
		t.Fatalf("a step ran while paused: %d", n)
	}
	rep := requestTick(t, b, 1)
	if rep.Status != api.TickPaused {
		t.Fatalf("tick while paused: %+v", rep)
	}
	set(false)
	testnats.Eventually(t, 10*time.Second, "the second batch after the resume", func() bool {
		return len(b.callbacks(t)[second]) > 0
	})
}

// requestTick sends one tick over NATS and returns its report.
func requestTick(t *testing.T, b *bundle, steps int) api.TickReport {
	t.Helper()
	nc := b.env.Conn(t, "ticker")
	m, err := nc.Request(streams.TickSubject(domain), []byte(strconv.Itoa(steps)), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var rep api.TickReport
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestReadyPaceHighBeforeMed: with both queues holding ready work, the
// ready pace takes every High batch before any Med one.
func TestReadyPaceHighBeforeMed(t *testing.T) {
	b := setup(t)
	var mu sync.Mutex
	var order []pipeline.Priority
	prio := map[uint64]pipeline.Priority{}
	b.mux.RegisterFunc("record", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		mu.Lock()
		order = append(order, prio[c.BatchID])
		mu.Unlock()
		return pipeline.Result{}, nil
	})
	b.startWorker(t, b.ctx)
	const each = 6
	mu.Lock()
	for i := range 2 * each {
		pr := pipeline.Med
		if i%2 == 1 {
			pr = pipeline.High
		}
		id := b.enqueue(t, pipeline.Batch{Priority: pr, Functions: []pipeline.Function{{Type: "record"}}})
		prio[id] = pr
	}
	mu.Unlock()
	b.pending(t, pipeline.High, each)
	b.pending(t, pipeline.Med, each)
	readyProcessor(t, b, processor.Options{Concurrency: 1})
	testnats.Eventually(t, 10*time.Second, "every batch run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 2*each
	})
	mu.Lock()
	defer mu.Unlock()
	for i, p := range order {
		if want := map[bool]pipeline.Priority{true: pipeline.High, false: pipeline.Med}[i < each]; p != want {
			t.Fatalf("step %d ran a %s batch, want %s (order %v)", i, p, want, order)
		}
	}
}

// TestReadyPaceRetriesWithTheirBackoff: a function that fails twice is
// retried after its backoff and succeeds, with no tick.
func TestReadyPaceRetriesWithTheirBackoff(t *testing.T) {
	b := setup(t)
	readyProcessor(t, b, processor.Options{})
	f := fn(handlers.TypeFlaky, handlers.FlakyArgs{FailAttempts: 2})
	f.Retry = retry(3, 50*time.Millisecond)
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{f, noop()}})
	testnats.Eventually(t, 10*time.Second, "the callback", func() bool { return len(b.callbacks(t)[id]) > 0 })
	if cb := b.callbacks(t)[id][0]; cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s", cb.Outcome)
	}
	if n := runsOf(b, id, 0); n != 3 {
		t.Fatalf("ran %d times, want 3", n)
	}
}

// TestTickOnlyPaceTakesNoStepWithoutATick: a processor set to the tick pace
// runs nothing until ticked, however long ready work waits.
func TestTickOnlyPaceTakesNoStepWithoutATick(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{Pace: processor.PaceTick})
	runProcessor(t, b, p)
	id := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	b.pending(t, pipeline.Med, 1)
	// A tick-only processor leaves no wait for work on the server, and
	// takes nothing.
	if w, _, acks := b.waiting(t, pipeline.Med); w != 0 || acks != 0 {
		t.Fatalf("%d requests waiting, %d tokens taken: want none", w, acks)
	}
	if n := b.calls.total(); n != 0 {
		t.Fatalf("%d calls without a tick", n)
	}
	rep := requestTick(t, b, 4)
	if rep.Status != api.TickOK || len(rep.Steps) != 1 || rep.Steps[0].BatchID != id {
		t.Fatalf("tick report %+v", rep)
	}
}

// TestThrottleHoldsAcrossReplicasAndRestarts: three replicas throttled to
// R steps a second take R steps in a second of their (frozen) clock
// together, whatever the backlog, ticks from outside included; a replica
// started in the same second finds the budget spent; the next second opens
// R more.
func TestThrottleHoldsAcrossReplicasAndRestarts(t *testing.T) {
	b := setup(t)
	const limit = 5
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 500_000_000)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	for _, name := range []string{"A", "B", "C"} {
		readyProcessor(t, b, processor.Options{Name: name, Throttle: limit, Now: clock})
	}
	for range 4 * limit {
		b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	}
	testnats.Eventually(t, 10*time.Second, "the second's budget spent", func() bool {
		return b.calls.total() >= limit && requestTick(t, b, 8).Status == api.TickThrottled
	})
	if n := b.calls.total(); n != limit {
		t.Fatalf("%d steps in one second of a throttle of %d", n, limit)
	}
	w := throttleWindow(t, b)
	if w.Used != limit || w.Limit != limit || w.Second != now.Unix() {
		t.Fatalf("window %+v", w)
	}
	// A replica started now (a restart) draws from the same budget.
	late := b.processor(t, processor.Options{Name: "late", Throttle: limit, Now: clock})
	if rep := late.Tick(b.ctx, 8); rep.Status != api.TickThrottled {
		t.Fatalf("a new replica's tick in a spent second: %+v", rep)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	testnats.Eventually(t, 10*time.Second, "the next second's budget spent", func() bool {
		return b.calls.total() >= 2*limit && requestTick(t, b, 8).Status == api.TickThrottled
	})
	if n := b.calls.total(); n != 2*limit {
		t.Fatalf("%d steps in two seconds of a throttle of %d", n, limit)
	}
}

// throttleWindow reads the domain's throttle window, as admin.
func throttleWindow(t *testing.T, b *bundle) records.ThrottleWindow {
	t.Helper()
	kv, err := b.admin.KeyValue(b.ctx, streams.BucketLocks)
	if err != nil {
		t.Fatal(err)
	}
	w, ok, err := streams.NewThrottleStore(kv, time.Now).Window(b.ctx, domain)
	if err != nil || !ok {
		t.Fatalf("throttle window: %v (found %v)", err, ok)
	}
	return w
}

// askedQueues counts, from now on, the requests for messages sent to the
// consumers of each queue stream (fetches and waits alike), as a monitor
// subscription of admin's sees them, and returns what counted so far once
// every request sent before the call has been seen.
func (b *bundle) askedQueues(t *testing.T) func() map[string]int {
	t.Helper()
	admin := b.env.Conn(t, "admin")
	var mu sync.Mutex
	asked := map[string]int{}
	sub, err := admin.Subscribe("$JS.API.CONSUMER.MSG.NEXT.>", func(m *nats.Msg) {
		mu.Lock()
		asked[strings.Split(m.Subject, ".")[5]]++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() map[string]int {
		if err := admin.Flush(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(asked)
	}
}

// TestReadyPaceAsksTheServerOnlyWhatItDoesNotKnow: a replica of the ready
// pace given one token by its waiting request asks the server for tokens
// no more than the step needs. It does not fetch more when the delivery
// said none was left, nor from a queue its waiting request says has no
// ready token (MED throughout; HIGH once the request it leaves there while
// the step runs is outstanding), and it does not follow the tick that ran
// the queues dry with an empty one: one request to HIGH's consumer (that
// waiting request, which the idle wait after the tick keeps) and none to
// MED's. A MED token sent afterwards still wakes it and runs.
func TestReadyPaceAsksTheServerOnlyWhatItDoesNotKnow(t *testing.T) {
	b := setup(t)
	b.startWorker(t, b.ctx)
	readyProcessor(t, b, processor.Options{IdleWait: time.Minute})
	b.idle(t, pipeline.High, 1)
	b.idle(t, pipeline.Med, 1)
	asked := b.askedQueues(t)
	id := b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
	testnats.Eventually(t, 10*time.Second, "the HIGH batch's callback", func() bool { return len(b.callbacks(t)[id]) > 0 })
	b.idle(t, pipeline.High, 1)
	if got, want := asked(), map[string]int{streams.QueueStream(pipeline.High): 1}; !maps.Equal(got, want) {
		t.Fatalf("requests to the queues' consumers for one HIGH batch: %v, want %v", got, want)
	}
	med := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	testnats.Eventually(t, 10*time.Second, "the MED batch's callback", func() bool { return len(b.callbacks(t)[med]) > 0 })
}

// TestReadyPaceWakesOneReplicaPerToken: of two idle replicas of the ready
// pace, one is given a token that becomes ready, with its waiting request;
// the other is not woken, and asks the server nothing. For three batches
// sent one after another, the queues' consumers are asked three times in
// all, each time by the replica that ran a batch and waits again (a wait
// that woke every replica cost each of them a fetch and a new request per
// batch: 12).
func TestReadyPaceWakesOneReplicaPerToken(t *testing.T) {
	b := setup(t)
	b.startWorker(t, b.ctx)
	readyProcessor(t, b, processor.Options{Name: "a", IdleWait: time.Minute})
	readyProcessor(t, b, processor.Options{Name: "b", IdleWait: time.Minute})
	b.idle(t, pipeline.High, 2)
	b.idle(t, pipeline.Med, 2)
	asked := b.askedQueues(t)
	for range 3 {
		id := b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
		testnats.Eventually(t, 10*time.Second, "the batch's callback", func() bool { return len(b.callbacks(t)[id]) > 0 })
		b.idle(t, pipeline.High, 2)
	}
	if got, want := asked(), map[string]int{streams.QueueStream(pipeline.High): 3}; !maps.Equal(got, want) {
		t.Fatalf("requests to the queues' consumers for three HIGH batches: %v, want %v", got, want)
	}
}

// slowStep starts one replica of the ready pace, idle, then sends it a MED
// batch whose handler waits at hold, and returns once that handler runs.
// The step's work request outlasts the tests' waits: it does not end on
// its own.
func slowStep(t *testing.T) (b *bundle, hold *testsystem.Hold, slow uint64) {
	t.Helper()
	b = setup(t)
	hold = testsystem.NewHold(t, 1)
	b.mux.RegisterFunc("hold", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		hold.Wait()
		return pipeline.Result{}, nil
	})
	b.startWorker(t, b.ctx)
	readyProcessor(t, b, processor.Options{WorkTimeout: time.Minute})
	b.idle(t, pipeline.Med, 1)
	slow = b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{{Type: "hold"}}})
	if _, ok := testnats.Receive(hold.Started(), 10*time.Second); !ok {
		t.Fatal("the slow batch's handler did not start")
	}
	return b, hold, slow
}

// TestReadyPaceTakesWorkBesideASlowStep: one replica of the ready pace
// whose only step waits in its handler still takes a batch sent meanwhile,
// and runs it to its callback before the slow one ends.
func TestReadyPaceTakesWorkBesideASlowStep(t *testing.T) {
	b, hold, slow := slowStep(t)
	for _, prio := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		id := b.enqueue(t, pipeline.Batch{Priority: prio, Functions: []pipeline.Function{noop()}})
		testnats.Eventually(t, 10*time.Second, "the "+string(prio)+" batch's callback while the slow one runs", func() bool {
			return len(b.callbacks(t)[id]) > 0
		})
	}
	if len(b.callbacks(t)[slow]) != 0 {
		t.Fatal("the slow batch finished while its handler was held")
	}
	hold.Release()
	testnats.Eventually(t, 10*time.Second, "the slow batch's callback", func() bool { return len(b.callbacks(t)[slow]) > 0 })
}

// TestReadyPaceDoesNotSpinOnAFullHighQueue: while a tick's step runs, the
// tick watches only the queues it still asks. HIGH's consumer held at
// MaxAckPending leaves the tick's fetch of HIGH unanswered, so the tick
// asks only MED; when a place frees up, HIGH's token becomes ready, and a
// watch on HIGH would wake the tick again and again for a token it does
// not fetch. HIGH is asked only a few times meanwhile, and its token runs
// once the slow step ends.
func TestReadyPaceDoesNotSpinOnAFullHighQueue(t *testing.T) {
	b := setup(t, func(s *streams.Settings) { s.MaxAckPending, s.AckWait = 1, time.Minute })
	hold := testsystem.NewHold(t, 1)
	b.mux.RegisterFunc("hold", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		hold.Wait()
		return pipeline.Result{}, nil
	})
	b.startWorker(t, b.ctx)
	b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
	// Another client holds HIGH's one place.
	c, err := b.admin.Consumer(b.ctx, streams.QueueStream(pipeline.High), streams.ProcessorConsumer(domain))
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	testnats.Eventually(t, 5*time.Second, "HIGH's token held", func() bool {
		batch, err := c.FetchNoWait(1)
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			held = m
		}
		return held != nil
	})
	high := b.enqueue(t, pipeline.Batch{Priority: pipeline.High, Functions: []pipeline.Function{noop()}})
	slow := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{{Type: "hold"}}})
	readyProcessor(t, b, processor.Options{WorkTimeout: time.Minute})
	if _, ok := testnats.Receive(hold.Started(), 10*time.Second); !ok {
		t.Fatal("the slow MED batch did not start")
	}
	asked := b.askedQueues(t)
	// A place frees up: HIGH's waiting token becomes ready.
	if err := held.Term(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // a spin would ask HIGH hundreds of times
	if n := asked()[streams.QueueStream(pipeline.High)]; n > 3 {
		t.Fatalf("HIGH's consumer was asked %d times in 300ms while the tick's step ran, want at most 3", n)
	}
	hold.Release()
	testnats.Eventually(t, 10*time.Second, "both batches' callbacks", func() bool {
		cbs := b.callbacks(t)
		return len(cbs[high]) > 0 && len(cbs[slow]) > 0
	})
}

// TestReadyPacePauseStopsATickThatLasts: a tick of the ready pace that has
// lasted longer than it trusts the pause it read at its start (its step
// held in its handler) reads the pause again before it takes more: a batch
// sent after the domain was paused does not run, though it arrives while
// that tick still runs, nor when the held step ends; it runs once the
// domain resumes.
func TestReadyPacePauseStopsATickThatLasts(t *testing.T) {
	b, hold, slow := slowStep(t)
	// The tick now lasts longer than the pause read at its start is
	// trusted (100ms).
	time.Sleep(250 * time.Millisecond)
	b.setPaused(t, true)
	late := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	hold.Release()
	testnats.Eventually(t, 10*time.Second, "the slow batch's callback", func() bool { return len(b.callbacks(t)[slow]) > 0 })
	if cbs := b.callbacks(t)[late]; len(cbs) != 0 {
		t.Fatalf("a batch sent after the pause ran: %+v", cbs)
	}
	// The slow batch's token leaves MED with its acknowledgement, which
	// may reach the server a moment after its callback: wait for it, and
	// the late batch's token stays.
	var n uint64
	testnats.Eventually(t, 10*time.Second, "MED holding only the late batch's token", func() bool {
		n = b.tokens(t, pipeline.Med)
		return n <= 1
	})
	if n != 1 {
		t.Fatalf("%d tokens in MED, want the late batch's", n)
	}
	if cbs := b.callbacks(t)[late]; len(cbs) != 0 {
		t.Fatalf("a batch sent after the pause ran: %+v", cbs)
	}
	b.setPaused(t, false)
	testnats.Eventually(t, 10*time.Second, "the late batch's callback once resumed", func() bool { return len(b.callbacks(t)[late]) > 0 })
}
