package submit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// The writes of a submission through an AckPublisher: published without a
// request each (no reply inbox, timer or channel of nats' request per
// write), so that a submission's record and index go out together and are
// awaited together, and the PubAck read by jsapi.ReadPubAck. An answer
// that stored nothing is made again through jetstream, which words the
// error (and, for a create, decides it).

// PublishAcked is Publish with m published through acks: m's reply
// subject is set, so pass a message that is not reused.
func PublishAcked(ctx context.Context, js jetstream.JetStream, acks *jsapi.AckPublisher, m *nats.Msg) (Ack, error) {
	w, err := StartPublish(acks, m)
	if err != nil {
		return Ack{}, err
	}
	return w.Wait(ctx, js)
}

// PendingPublish is a message published through an AckPublisher whose
// PubAck is awaited later (Wait): a bulk submission starts the writes of
// many batches and then awaits them together, instead of a round trip and
// a goroutine's wake-up each.
type PendingPublish struct {
	pa      *jsapi.PendingAck
	subject string
	header  nats.Header
	data    []byte
}

// StartPublish publishes m through acks and returns its pending answer:
// m's reply subject is set, so pass a message that is not reused. An
// error says m was not sent.
func StartPublish(acks *jsapi.AckPublisher, m *nats.Msg) (*PendingPublish, error) {
	w := &PendingPublish{subject: m.Subject, header: m.Header, data: m.Data}
	pa, err := acks.Publish(m)
	if err != nil {
		return nil, err
	}
	w.pa = pa
	return w, nil
}

// Wait waits for the PubAck (as PublishAcked does): an answer that stored
// nothing is made again through js, which words the error.
func (w *PendingPublish) Wait(ctx context.Context, js jetstream.JetStream) (Ack, error) {
	a, err := w.pa.WaitPubAck(ctx)
	if !answered(ctx, err) {
		return a, err
	}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: w.subject, Header: w.header, Data: w.data})
	if err != nil {
		return Ack{}, err
	}
	return Ack{Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// answered says err is a stream's answer that stored nothing, rather than
// success or no answer at all (the wait timed out or its ctx ended).
func answered(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !errors.Is(err, jsapi.ErrPubAckTimeout)
}

// CreateKeyAcked is kv.Create(ctx, key, data) published through acks.
// Any answer but a stored key stored nothing, and the write is made again
// by kv.Create, which decides it: a key whose last revision is a delete
// or purge is created on it, one that exists is an error matching
// jetstream.ErrKeyExists.
func CreateKeyAcked(ctx context.Context, acks *jsapi.AckPublisher, kv jetstream.KeyValue, key string, data []byte) (uint64, error) {
	w, err := StartCreateKey(acks, kv, key, data)
	if err != nil {
		return 0, err
	}
	return w.Wait(ctx)
}

// PendingCreate is a KV create published through an AckPublisher whose
// answer is awaited later (Wait).
type PendingCreate struct {
	pa   *jsapi.PendingAck
	kv   jetstream.KeyValue
	key  string
	data []byte
}

// StartCreateKey is CreateKeyAcked split in two: the create is published
// now, and its answer awaited with Wait. An error says nothing was sent.
func StartCreateKey(acks *jsapi.AckPublisher, kv jetstream.KeyValue, key string, data []byte) (*PendingCreate, error) {
	pa, err := acks.Publish(&nats.Msg{Subject: "$KV." + kv.Bucket() + "." + key, Header: createHeader, Data: data})
	if err != nil {
		return nil, err
	}
	return &PendingCreate{pa: pa, kv: kv, key: key, data: data}, nil
}

// Wait waits for the create's PubAck, and makes an answer that stored
// nothing again with kv.Create, as CreateKeyAcked does: the key's
// revision, or an error matching jetstream.ErrKeyExists when it exists.
func (w *PendingCreate) Wait(ctx context.Context) (uint64, error) {
	seq, err := w.pa.Wait(ctx)
	if !answered(ctx, err) {
		return seq, err
	}
	return w.kv.Create(ctx, w.key, w.data)
}

// PendingRecord is the record of a new batch published through an
// AckPublisher, its answer awaited later (Wait): StartRecord and Wait are
// CreateAcked for a new batch, split so that a bulk
// submission writes the records of many batches before it awaits them.
type PendingRecord struct {
	b *pipeline.Batch
	w *PendingCreate
}

// StartRecord encodes the record of b, a new batch (with idempotency key
// idemKey, or none), and publishes its create through acks. An error says
// nothing was sent.
func StartRecord(acks *jsapi.AckPublisher, kv jetstream.KeyValue, b *pipeline.Batch, idemKey string) (*PendingRecord, error) {
	data, err := records.Encode(NewRecord(b, idemKey))
	if err != nil {
		return nil, err
	}
	w, err := StartCreateKey(acks, kv, streams.BatchKey(b.ID), data)
	if err != nil {
		return nil, fmt.Errorf("submit: record batch %d: %w", b.ID, err)
	}
	return &PendingRecord{b: b, w: w}, nil
}

// Wait waits until the record is created, and returns what was written.
func (r *PendingRecord) Wait(ctx context.Context) (*Created, error) {
	rev, err := r.w.Wait(ctx)
	if err != nil {
		return nil, fmt.Errorf("submit: record batch %d: %w", r.b.ID, err)
	}
	return &Created{Data: r.w.data, Rev: rev}, nil
}

// CreateAcked is Create with the record written through acks
// (CreateKeyAcked).
func CreateAcked(ctx context.Context, acks *jsapi.AckPublisher, kv jetstream.KeyValue, b *pipeline.Batch, idemKey string, dup bool) (*pipeline.Batch, *Created, error) {
	return create(ctx, kv, b, idemKey, dup, func(ctx context.Context, key string, data []byte) (uint64, error) {
		return CreateKeyAcked(ctx, acks, kv, key, data)
	})
}

// PublishTokenAcked is PublishToken with the token published through acks.
func PublishTokenAcked(ctx context.Context, js jetstream.JetStream, acks *jsapi.AckPublisher, b *pipeline.Batch, gen, step uint32) error {
	return publishToken(ctx, b, gen, step, func(m *nats.Msg) (Ack, error) { return PublishAcked(ctx, js, acks, m) })
}

// PendingToken is the first token of a batch published through an
// AckPublisher, its PubAck awaited later (Wait): StartToken and Wait are
// PublishTokenAcked, split as StartRecord is.
type PendingToken struct {
	b *pipeline.Batch
	w *PendingPublish
}

// StartToken builds the token of b at generation gen and step (with
// ctx's trace) and publishes it through acks. An error says it was not
// sent.
func StartToken(ctx context.Context, acks *jsapi.AckPublisher, b *pipeline.Batch, gen, step uint32) (*PendingToken, error) {
	m, err := tokenMsg(ctx, b, gen, step)
	if err != nil {
		return nil, err
	}
	return startToken(acks, b, m)
}

// FreshTokenWithin bounds when a send publishes its fresh batch's first
// token without a deduplication id: within this time of the batch's
// CreatedAt. A send that gets there later (its writes stalled) publishes
// it marked and with its id (streams.FirstTokenAgainMsg), as a copy is:
// an authz start that finds a fresh batch queued nowhere waits this long
// after its start before it queues it, so that no unmarked token is stored
// after the copy it publishes.
const FreshTokenWithin = 2 * time.Second

// StartNewToken is StartToken for the first publish of a fresh batch's
// first token (a send's own batch, without an idempotency key, a key or a
// run_at): without a deduplication id (streams.NewTokenMsg), or, past
// FreshTokenWithin of its CreatedAt by now, marked and with it.
func StartNewToken(ctx context.Context, acks *jsapi.AckPublisher, b *pipeline.Batch, now time.Time) (*PendingToken, error) {
	build := newTokenMsg
	if now.Sub(b.CreatedAt) >= FreshTokenWithin {
		build = againTokenMsg
	}
	m, err := build(ctx, b)
	if err != nil {
		return nil, err
	}
	return startToken(acks, b, m)
}

func startToken(acks *jsapi.AckPublisher, b *pipeline.Batch, m *nats.Msg) (*PendingToken, error) {
	w, err := StartPublish(acks, m)
	if err != nil {
		return nil, fmt.Errorf("submit: queue batch %d: %w", b.ID, err)
	}
	return &PendingToken{b: b, w: w}, nil
}

// Wait waits until the token is stored.
func (t *PendingToken) Wait(ctx context.Context, js jetstream.JetStream) error {
	if _, err := t.w.Wait(ctx, js); err != nil {
		return fmt.Errorf("submit: queue batch %d: %w", t.b.ID, err)
	}
	return nil
}
