package authz

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// partsTable is the table of the stand-alone part tests: alice sends noop
// calls to domain pay, under jobs, keyed or not (pay allows no other
// type); bob sends to domain ship.
const partsTable = `
domains:
  pay: {allowed_types: [noop]}
labels:
  jobs: {domain: pay, users: [alice], mode: non_atomic, priority: med, functions: {noop: {}}}
  limited: {domain: pay, users: [alice], mode: non_atomic, priority: med, max_concurrent: 1, functions: {noop: {}}}
  parcels: {domain: ship, users: [bob], mode: non_atomic, priority: high, functions: {noop: {}}}
`

// parts is one server's provisioned resources for domains pay and ship,
// bound as New binds them, with the record and progress stores over them
// and a clock that moves only when told: what a test needs to build one
// part of the service directly, on its own fields.
type parts struct {
	env *testnats.Env
	ctx context.Context
	nc  *nats.Conn
	js  jetstream.JetStream
	// admin reads and writes what authz may not, as a test's witness.
	admin    jetstream.JetStream
	h        *bound
	progress *streams.ProgressStore
	store    *recordStore
	clock    *clock
	table    *Table
	log      *slog.Logger
}

func newParts(t *testing.T, opts ...testnats.Option) *parts {
	t.Helper()
	env := testnats.Start(t, []string{"pay", "ship"}, opts...)
	p := &parts{env: env, ctx: testnats.Context(t, 60*time.Second), nc: env.Conn(t, "authz"), admin: env.JS(t, "admin"),
		clock: &clock{now: time.Now().UTC()}, log: slog.New(slog.DiscardHandler)}
	var err error
	if p.js, err = jetstream.New(p.nc); err != nil {
		t.Fatal(err)
	}
	if p.h, err = bind(p.ctx, p.nc, p.js); err != nil {
		t.Fatal(err)
	}
	if p.table, err = ParseTable([]byte(partsTable)); err != nil {
		t.Fatal(err)
	}
	p.progress = streams.NewProgressStore(p.h.progress, p.clock.Now)
	p.store = p.newStore()
	return p
}

// newStore is a record store over p, as New builds it before it reads the
// retention provisioned: one whose records never expire.
func (p *parts) newStore() *recordStore {
	return &recordStore{js: p.js, batches: p.h.batches, acks: p.h.acks, progress: p.progress, owner: DefaultOwner, now: p.clock.Now}
}

// Table is the table in force, as Service.Table.
func (p *parts) Table() *Table { return p.table }

// remover is the removal part over p.
func (p *parts) remover() *remover {
	return &remover{js: p.js, queues: p.h.queues, scheduled: p.h.scheduled, progress: p.progress, store: p.store, owner: DefaultOwner, log: p.log}
}

// keyOrders is the per-key order over p, with the scheduled batches,
// removal and repair parts it calls, linked as compose links them.
func (p *parts) keyOrders() *keyOrders {
	rv := p.remover()
	sb := &scheduledBatches{js: p.js, acks: p.h.acks, scheduled: p.h.scheduled, due: p.h.due, progress: p.progress, store: p.store,
		removal: rv, now: p.clock.Now, log: p.log}
	order := keyorder.New(p.h.keys, p.clock.Now)
	ko := &keyOrders{js: p.js, order: order, senders: p.h.senders, progress: p.progress, store: p.store, scheduled: sb, removal: rv,
		now: p.clock.Now, log: p.log}
	ko.repair = &keyRepairer{keys: ko, order: order, store: p.store, log: p.log,
		repairs: repairs{pending: map[repairRef]*repairWait{}, wake: make(chan struct{}, 1)}}
	sb.startHead = ko.startHead
	return ko
}

// inspector is the owner's views over p, reading the scheduled batches
// of ko.
func (p *parts) inspector(ko *keyOrders) *inspector {
	return &inspector{dlq: p.h.dlq, locks: p.h.locks, state: p.h.state, queues: p.h.queues, progress: p.progress, store: p.store,
		scheduled: ko.scheduled, table: p.Table, now: p.clock.Now}
}

// intake takes submissions onto the queues over p, admitting them to ko.
func (p *parts) intake(ko *keyOrders) *intake {
	return &intake{js: p.js, batches: p.h.batches, acks: p.h.acks, ids: submit.NewIDs(p.js), store: p.store,
		slots: p.slots(), submitters: p.submitters(),
		keys: ko, repair: ko.repair, table: p.Table, now: p.clock.Now, log: p.log}
}

// slots is the slot keeper over p.
func (p *parts) slots() *slotKeeper {
	return &slotKeeper{locks: p.h.locks, store: p.store, now: p.clock.Now, log: p.log}
}

// callbackApplier applies callbacks over p, releasing keys through ko.
func (p *parts) callbackApplier(ko *keyOrders) *callbackApplier {
	return &callbackApplier{js: p.js, nc: p.nc, acks: p.h.acks, consumer: p.h.callbacks, store: p.store, slots: p.slots(),
		senders: p.senderPool(p.h), keys: ko, table: p.Table,
		now: p.clock.Now, log: p.log, concurrency: 8, groups: 2, backoff: []time.Duration{time.Second}}
}

// senderPool is the sender pools' part over h: p's, or another
// replica's.
func (p *parts) senderPool(h *bound) *senderPool {
	return &senderPool{senders: h.senders, progress: p.progress, now: p.clock.Now, log: p.log}
}

// submitters is the submitter index over p.
func (p *parts) submitters() *submitterIndex { return p.submittersOver(p.h) }

// submittersOver is the submitter index over h: p's, or another
// replica's.
func (p *parts) submittersOver(h *bound) *submitterIndex {
	return &submitterIndex{acks: h.acks, batches: h.batches, now: p.clock.Now, owner: DefaultOwner}
}

// replica binds another authz connection to p's server, as a second
// replica's New does: parts built over it race p's for the same entries.
func (p *parts) replica(t *testing.T) *bound {
	t.Helper()
	nc := p.env.Conn(t, "authz")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := bind(p.ctx, nc, js)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// batch is a batch of alice's under jobs, one noop call, in pay's med
// queue; change adjusts it before it is enqueued.
func (p *parts) batch(change func(b *pipeline.Batch)) pipeline.Batch {
	b := pipeline.Batch{Domain: "pay", Label: "jobs", Submitter: "alice", Priority: pipeline.Med,
		Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{{Type: "noop"}}}
	if change != nil {
		change(&b)
	}
	return b
}

// enqueue records b and publishes its first token, as a send without
// checks does, and returns it as recorded.
func (p *parts) enqueue(t *testing.T, b pipeline.Batch) *pipeline.Batch {
	t.Helper()
	if _, err := submit.Enqueue(p.ctx, p.js, &b, "", p.clock.Now()); err != nil {
		t.Fatal(err)
	}
	return &b
}

// recordOnly records b under a new id and publishes no token: a batch
// whose send was cut short after its record.
func (p *parts) recordOnly(t *testing.T, b pipeline.Batch) *pipeline.Batch {
	t.Helper()
	id, _, err := submit.AssignID(p.ctx, p.js, "")
	if err != nil {
		t.Fatal(err)
	}
	b.ID, b.CreatedAt = id, p.clock.Now()
	if _, err := submit.Record(p.ctx, p.h.batches, &b, "", false); err != nil {
		t.Fatal(err)
	}
	return &b
}

// record reads batch id's record as stored.
func (p *parts) record(t *testing.T, id uint64) *records.BatchRecord {
	t.Helper()
	rec, err := p.store.record(p.ctx, id)
	if err != nil {
		t.Fatalf("record of batch %d: %v", id, err)
	}
	return rec
}

// loadProgress reads batch b's progress as stored, with its revision.
func (p *parts) loadProgress(t *testing.T, b *pipeline.Batch) *streams.ProgressEntry {
	t.Helper()
	st, err := p.progress.Load(p.ctx, b.Domain, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// tokens returns the (generation, step) of every token of batch id in
// queue stream of priority pr, in stream order, read as admin.
func (p *parts) tokens(t *testing.T, pr pipeline.Priority, id uint64) [][2]uint32 {
	t.Helper()
	var out [][2]uint32
	for _, data := range testnats.Messages(t, p.admin, streams.QueueStream(pr)) {
		if tok, err := records.Decode[records.Token](data); err == nil && tok.BatchID == id {
			out = append(out, [2]uint32{tok.Gen, tok.Rotation})
		}
	}
	return out
}

// callbacks returns the callbacks of batch id in CALLBACKS, read as admin.
func (p *parts) callbacks(t *testing.T, id uint64) []records.Callback {
	t.Helper()
	return testnats.Callbacks(t, p.admin)[id]
}

// codeOf is the API code err answers with (serve's mapping): 0 for nil,
// api.CodeInternal for an error that is no API error.
func codeOf(err error) int {
	var ae *Error
	var ve *pipeline.ValidationError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ae):
		return ae.Code
	case errors.As(err, &ve):
		return api.CodeBadRequest
	}
	return api.CodeInternal
}

// removedBy says whether batch b's progress is Done as RemovedByOwner and
// one callback of its says so.
func (p *parts) removedBy(t *testing.T, b *pipeline.Batch) bool {
	t.Helper()
	st := p.loadProgress(t, b)
	cbs := p.callbacks(t, b.ID)
	return removed(st) && len(cbs) == 1 && cbs[0].Outcome.Status == pipeline.RemovedByOwner
}

// finishedBy publishes the callback of a processor of b's domain that ran
// b to outcome o, as that processor: the message authz would apply.
func (p *parts) finishedBy(t *testing.T, b *pipeline.Batch, o pipeline.Outcome) *records.Callback {
	t.Helper()
	cb := &records.Callback{V: 1, BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Processor: "p1", Outcome: o, Attempts: 1, At: p.clock.Now()}
	m, err := streams.CallbackMsg(cb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.env.JS(t, "processor").PublishMsg(p.ctx, m); err != nil {
		t.Fatal(err)
	}
	return cb
}
