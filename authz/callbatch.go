package authz

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/tickflow/tickflow/internal/drain"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// callbackGroups bounds the groups of callbacks a replica applies at once:
// two (one written while the next gathers, as a processor's unit requests
// are), and one more for each four cores past eight, so that a machine
// with many cores keeps more writes in flight.
func callbackGroups() int { return max(2, runtime.GOMAXPROCS(0)/4) }

// pubAckWait bounds the wait for the PubAcks of a group's record writes; a
// write not acknowledged by then is applied again the patient way, which
// finds it stored or not.
const pubAckWait = 5 * time.Second

// callbackBatcher applies the callbacks the consumer delivers in groups
// (group commit): a group's records are written together, each with
// compare-and-set on the revision it was read or created at, and their
// PubAcks awaited together, instead of a goroutine and two round trips
// each. A record this replica created is remembered at its revision; the
// others (created by another replica, or forgotten behind a backlog larger
// than what is remembered) are read together first, with pipelined direct
// gets. Each callback is acknowledged only once its own write is stored
// and what its batch held is released. Everything else (a record not
// found or unreadable, a write that lost its race or failed, a callback
// that is repeated, a record of another domain) is applied alone (apply),
// on a goroutine of its own, at most Options.Concurrency at once.
type callbackBatcher struct {
	a *callbackApplier
	// gate admits the goroutines, so that Run's shutdown waits for them.
	gate *drain.Gate
	// size is the largest group; slots bounds the callbacks handled alone.
	size  int
	slots chan struct{}

	mu      sync.Mutex
	room    sync.Cond // signalled as pending shrinks
	pending []*groupItem
	running int // groups being applied

	// fellBack counts the callbacks of a group that went the patient way
	// after their record's write.
	fellBack atomic.Int64
	// readFirst counts the writes of a group sent after reading their
	// record (not remembered by this replica).
	readFirst atomic.Int64
}

func (ca *callbackApplier) newCallbackBatcher(gate *drain.Gate) *callbackBatcher {
	b := &callbackBatcher{a: ca, gate: gate, size: ca.concurrency, slots: make(chan struct{}, ca.concurrency)}
	b.room.L = &b.mu
	return b
}

// add takes a delivered message of callbacks (one, or a group of them);
// its caller holds an admission of gate. It waits while a few groups'
// worth are pending, so that the consumer does not pull far ahead of what
// is applied. The callbacks of one message may be applied in different
// groups: the message is settled once all of them are (delivery).
func (b *callbackBatcher) add(ctx context.Context, m jetstream.Msg) {
	items := b.receive(ctx, m)
	if len(items) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for len(b.pending) >= 4*b.size {
		b.room.Wait()
	}
	b.pending = append(b.pending, items...)
	if b.running < b.a.groups {
		b.running++
		b.gate.Go(func() { b.run(ctx) })
	}
}

// receive decodes m (callbackApplier.receive) into the items of the
// callbacks to apply, each with the span of its application.
func (b *callbackBatcher) receive(ctx context.Context, m jetstream.Msg) []*groupItem {
	rs := b.a.receive(ctx, m)
	items := make([]groupItem, len(rs))
	out := make([]*groupItem, len(rs))
	for i := range rs {
		it := &items[i]
		it.received = rs[i]
		if t := rs[i].cb.Trace; len(t) > 0 {
			// A callback that may travel in a group carries its step's
			// trace in its body: a group's headers are not its own.
			it.ctx, it.span = b.a.tel.StartApply(b.a.tel.ExtractMap(ctx, t), nil)
		} else {
			it.ctx, it.span = b.a.tel.StartApply(ctx, m.Headers())
		}
		out[i] = it
	}
	return out
}

// run applies groups of what is pending until nothing is.
func (b *callbackBatcher) run(ctx context.Context) {
	for {
		b.mu.Lock()
		n := min(len(b.pending), b.size)
		if n == 0 {
			b.running--
			b.mu.Unlock()
			return
		}
		group := slices.Clone(b.pending[:n])
		rest := copy(b.pending, b.pending[n:])
		clear(b.pending[rest:])
		b.pending = b.pending[:rest]
		b.room.Broadcast()
		b.mu.Unlock()
		b.apply(ctx, group)
	}
}

// groupItem is a callback of a group whose record write is on its way.
type groupItem struct {
	received
	ctx  context.Context
	span trace.Span
	c    callbackChange
	rec  records.BatchRecord
	ack  *jsapi.PendingAck
	// keyAck is the answer to the rewrite of the batch's idempotency key,
	// published just before its terminal record (keyBeforeTerminal).
	keyAck *jsapi.PendingAck
	// get is the read of a record not remembered, on its way.
	get *jsapi.PendingAck
}

// forgetKey gives up the answer to the key's rewrite: the callback is
// applied alone, which writes the key again.
func (it *groupItem) forgetKey() {
	if it.keyAck != nil {
		it.keyAck.Forget()
		it.keyAck = nil
	}
}

// apply applies a group of callbacks.
func (b *callbackBatcher) apply(ctx context.Context, items []*groupItem) {
	a := b.a
	sent, reads := 0, 0
	for _, it := range items {
		switch b.write(it) {
		case groupWriting:
			sent++
		case groupReading:
			reads++
		default:
			b.alone(it)
		}
	}
	if sent == 0 && reads == 0 {
		return
	}
	// The writes were sent: their PubAcks are awaited even through
	// shutdown, which would otherwise redo them.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pubAckWait)
	defer cancel()
	if reads > 0 {
		sent += b.writeRead(ctx, wctx, items)
	}
	if sent == 0 {
		return
	}
	for _, it := range items {
		if it.ack == nil {
			continue
		}
		if err := b.await(ctx, wctx, it.ack); err != nil {
			// Most often the record changed since this replica created it
			// (an owner's edit, a callback applied meanwhile): applied on
			// the record as stored.
			b.fellBack.Add(1)
			it.forgetKey()
			b.alone(it)
			continue
		}
		if it.keyAck != nil {
			if b.await(ctx, wctx, it.keyAck) == nil {
				it.c.expire = nil // written: nothing left for the release to write
			}
			it.keyAck = nil
		}
		a.noteFinished(it.ctx, &it.c, &it.rec)
		if a.releasing(&it.c) {
			b.spawn(func() {
				defer it.span.End()
				a.settle(it.ctx, &it.received, true, a.releaseFinished(it.ctx, &it.c))
			})
			continue
		}
		a.settle(it.ctx, &it.received, true, nil)
		it.span.End()
	}
}

// await waits for the PubAck of a write until wctx is done. Shutdown (ctx
// done) stops the wait only once the connection is closed: its PubAck
// can come no more.
func (b *callbackBatcher) await(ctx, wctx context.Context, ack *jsapi.PendingAck) error {
	stop := ctx.Done()
	for {
		select {
		case <-ack.Done():
			_, err := ack.Result()
			return err
		case <-wctx.Done():
			ack.Forget()
			return wctx.Err()
		case <-stop:
			if b.a.nc.IsClosed() {
				ack.Forget()
				return nats.ErrConnectionClosed
			}
			stop = nil
		}
	}
}

// groupStep says where write left a callback of a group.
type groupStep int

const (
	groupAlone   groupStep = iota // to be applied alone
	groupWriting                  // its record's write was sent
	groupReading                  // its record's read was sent
)

// write sends the callback's change of the record this replica created,
// with compare-and-set on the revision it was created at; a record not
// remembered is read first (writeRead).
func (b *callbackBatcher) write(it *groupItem) groupStep {
	a, id := b.a, it.cb.BatchID
	rec, rev, ok := a.store.recent.take(id)
	if !ok {
		get, err := a.acks.Request(jsapi.KVGetMsg(streams.BucketBatches, streams.BatchKey(id)))
		if err != nil {
			return groupAlone
		}
		it.get = get
		return groupReading
	}
	it.rec = rec
	if !b.send(it, rev) {
		return groupAlone
	}
	return groupWriting
}

// writeRead awaits the reads write sent, and sends each record's change
// with compare-and-set on the revision read; it returns how many writes
// it sent. A callback whose record was not read, or whose change was not
// sent, is applied alone.
func (b *callbackBatcher) writeRead(ctx, wctx context.Context, items []*groupItem) (sent int) {
	for _, it := range items {
		get := it.get
		if get == nil {
			continue
		}
		it.get = nil
		if err := b.await(ctx, wctx, get); err != nil {
			b.alone(it)
			continue
		}
		data, rev, err := jsapi.ReadKVGet(get.Msg())
		if err != nil {
			b.alone(it) // not recorded, or not readable: apply says so
			continue
		}
		if it.rec, err = records.Decode[records.BatchRecord](data); err != nil || !b.send(it, rev) {
			b.alone(it)
			continue
		}
		b.readFirst.Add(1)
		sent++
	}
	return sent
}

// send applies the callback's change to it.rec and writes it with
// compare-and-set on revision rev; false when there is no change to write
// or it was not sent, and the callback is to be applied alone.
func (b *callbackBatcher) send(it *groupItem, rev uint64) bool {
	a := b.a
	it.c = a.callbackChange(&it.cb)
	if write, err := it.c.change(&it.rec); err != nil || !write {
		return false
	}
	data, err := records.Encode(&it.rec)
	if err != nil {
		return false
	}
	m := jsapi.KVUpdateMsg(streams.BucketBatches, streams.BatchKey(it.cb.BatchID), data, rev)
	if ttl := a.store.recordTTL(&it.rec); ttl > 0 {
		streams.SetTTL(m, ttl)
	}
	if a.store.writes(it.c.expire) {
		// The key no longer says taken before the record may expire
		// (keyBeforeTerminal): published first on the same connection
		// to the same stream, it is stored first.
		kack, err := a.acks.Publish(a.store.keyMsg(it.c.expire))
		if err != nil {
			return false
		}
		it.keyAck = kack
	}
	ack, err := a.acks.Publish(m)
	if err != nil {
		it.forgetKey()
		return false
	}
	it.ack = ack
	return true
}

// alone applies a callback of a group by itself (apply: read, change,
// compare-and-set), on a goroutine of its own.
func (b *callbackBatcher) alone(it *groupItem) {
	b.spawn(func() {
		defer it.span.End()
		recorded, err := b.a.apply(it.ctx, &it.cb)
		b.a.settle(it.ctx, &it.received, recorded, err)
	})
}

// spawn runs f on a goroutine of the gate, waiting for one of the slots.
func (b *callbackBatcher) spawn(f func()) {
	b.slots <- struct{}{}
	b.gate.Go(func() {
		defer func() { <-b.slots }()
		f()
	})
}
