package processor_test

import (
	"context"
	"encoding/json"
	"strconv"
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

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

const domain = "pay"

// bundle is a real server with a worker serving the example handlers and
// helpers to enqueue batches and observe callbacks.
type bundle struct {
	*testsystem.System
	env    *testnats.Env
	ledger *handlers.Ledger
	mux    *pipeline.ServeMux
	authz  jetstream.JetStream
	admin  jetstream.JetStream
	calls  counter
	ctx    context.Context
}

// counter counts handler executions per idempotency key.
type counter struct{ *testsystem.Counter }

func (c counter) get(k string) int { return c.Get(k) }
func (c counter) total() int       { return c.Total() }

// setup starts a server with the domain provisioned (ack wait 1 s, then
// settings applied) and a worker.
func setup(t *testing.T, settings ...func(*streams.Settings)) *bundle {
	t.Helper()
	b := newBundle(handlers.NewLedger(map[string]int64{"alice": 100, "bob": 0}, opsLabel))
	handlers.Register(b.mux, b.ledger, nil)
	b.start(t, worker.Options{}, settings...)
	return b
}

// newBundle is a bundle, not started, with a mux whose executions it
// counts.
func newBundle(ledger *handlers.Ledger) *bundle {
	mux := pipeline.NewServeMux()
	return &bundle{ledger: ledger, mux: mux, calls: counter{testsystem.Count(mux)}}
}

// start starts the server (ack wait 1 s, then settings applied) and a
// worker with opts serving b.mux.
func (b *bundle) start(t *testing.T, opts worker.Options, settings ...func(*streams.Settings)) {
	t.Helper()
	b.System = testsystem.Start(t, "", testsystem.Options{
		Domains: []string{domain},
		NATS: []testnats.Option{testnats.WithSettings(func(s *streams.Settings) {
			s.AckWait = time.Second
			for _, f := range settings {
				f(s)
			}
		})},
		Handlers: b.mux, Worker: opts,
	})
	b.env, b.ctx, b.authz, b.admin = b.Env, b.Ctx, b.AuthzJS, b.Admin
}

func (b *bundle) startWorker(t *testing.T, ctx context.Context) {
	t.Helper()
	b.startWorkerWith(t, ctx, worker.Options{})
}

// startWorkerWith starts one more worker over the bundle's mux.
func (b *bundle) startWorkerWith(t *testing.T, ctx context.Context, opts worker.Options) {
	t.Helper()
	b.RunWorker(ctx, t, b.mux, opts)
}

// processor binds a processor of the domain. Unless opts says otherwise it
// is tick-only: these tests tick it by hand and expect no step without a
// tick, even while Run serves its confirmations (pace_test.go tests the
// ready pace).
func (b *bundle) processor(t *testing.T, opts processor.Options) *processor.Processor {
	t.Helper()
	opts.Domain = domain
	if opts.Pace == "" {
		opts.Pace = processor.PaceTick
	}
	if opts.WorkTimeout == 0 {
		opts.WorkTimeout = 5 * time.Second
	}
	return b.Processor(t, opts)
}

// enqueue submits a batch the way authz does.
// opsLabel is the label of the batches the tests enqueue unless they name
// one, and an operator label of the ledger: their transfers may move anyone's
// money, as the ledger lets only operator labels do.
const opsLabel = "ops"

// setPaused writes the domain's pause state as the owner's pause and
// resume do.
func (b *bundle) setPaused(t *testing.T, paused bool) {
	t.Helper()
	kv, err := b.authz.KeyValue(b.ctx, streams.BucketDomainStates)
	if err != nil {
		t.Fatal(err)
	}
	v, err := json.Marshal(records.DomainState{Paused: paused, By: "owner", At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(b.ctx, domain, v); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) enqueue(t *testing.T, bt pipeline.Batch) uint64 {
	t.Helper()
	if bt.Label == "" {
		bt.Label = opsLabel
	}
	if bt.Domain == "" {
		bt.Domain = domain
	}
	if bt.Priority == "" {
		bt.Priority = pipeline.Med
	}
	if bt.Subroutine.Mode == "" {
		bt.Subroutine.Mode = pipeline.Atomic
	}
	return b.Enqueue(t, &bt)
}

// callbacks returns every callback in CALLBACKS, by batch id.
func (b *bundle) callbacks(t *testing.T) map[uint64][]records.Callback {
	t.Helper()
	return b.Callbacks(t)
}

// outcome waits (ticking p) for the batch's callback and returns it.
func (b *bundle) outcome(t *testing.T, p *processor.Processor, id uint64) records.Callback {
	t.Helper()
	return b.Outcome(t, p, id)
}

func (b *bundle) progress(t *testing.T, id uint64) records.Progress {
	t.Helper()
	p, ok := b.tryProgress(t, id)
	if !ok {
		t.Fatalf("batch %d has no progress record", id)
	}
	return p
}

// deadLetters returns the DLQ entries.
func (b *bundle) deadLetters(t *testing.T) []records.DeadLetter {
	t.Helper()
	return b.DeadLetters(t)
}

func key(id uint64, index int) string { return strconv.FormatUint(id, 10) + "/" + strconv.Itoa(index) }

// roundKey is the idempotency key of function index of batch id in round r.
func roundKey(id uint64, index, r int) string {
	if r == 0 {
		return key(id, index)
	}
	return key(id, index) + "/" + strconv.Itoa(r)
}

// runsOf counts the executions of function index of batch id in every round.
func runsOf(b *bundle, id uint64, index int) int {
	n := 0
	for r := 0; r < 8; r++ {
		n += b.calls.get(roundKey(id, index, r))
	}
	return n
}

func fn(typ string, payload any) pipeline.Function {
	return pipeline.Function{Type: typ, Payload: pipeline.MustPayload(payload)}
}

func noop() pipeline.Function { return pipeline.Function{Type: handlers.TypeNoop} }

func retry(times int, initial time.Duration) *pipeline.RetryLogic {
	return &pipeline.RetryLogic{Times: pipeline.Times(times), Backoff: pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(initial)}}
}

func pub(t *testing.T, nc *nats.Conn, subject string, data []byte) {
	t.Helper()
	if err := nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) tryProgress(t *testing.T, id uint64) (records.Progress, bool) {
	t.Helper()
	return b.Progress(t, id)
}

func natsErrorHandler(errs chan<- error) nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})
}

// queued counts the tokens left in both queues.
func (b *bundle) queued(t *testing.T) uint64 {
	t.Helper()
	return b.tokens(t, pipeline.High) + b.tokens(t, pipeline.Med)
}

// tokens counts the tokens in queue p's stream; authz's keeper, which
// stays, is not one.
func (b *bundle) tokens(t *testing.T, p pipeline.Priority) uint64 {
	t.Helper()
	s, err := b.admin.Stream(b.ctx, streams.QueueStream(p))
	if err != nil {
		t.Fatal(err)
	}
	n, err := streams.QueueTokens(b.ctx, s, p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// step ticks p for one step, polling until the step is taken: a token just
// published reaches the consumer a moment after its PubAck.
func step(t *testing.T, ctx context.Context, p *processor.Processor) api.StepReport {
	t.Helper()
	var rep api.TickReport
	testnats.Eventually(t, 5*time.Second, "a step", func() bool {
		rep = p.Tick(ctx, 1)
		return len(rep.Steps) == 1
	})
	return rep.Steps[0]
}

// progressKV is the progress bucket, as admin.
func (b *bundle) progressKV(t *testing.T) jetstream.KeyValue {
	t.Helper()
	kv, err := b.admin.KeyValue(b.ctx, streams.BucketProgress)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}
