package submit

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
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
	subject, header, data := m.Subject, m.Header, m.Data
	pa, err := acks.Publish(m)
	if err != nil {
		return Ack{}, err
	}
	a, err := pa.WaitPubAck(ctx)
	if !answered(ctx, err) {
		return a, err
	}
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: header, Data: data})
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
	pa, err := acks.Publish(&nats.Msg{Subject: "$KV." + kv.Bucket() + "." + key, Header: createHeader, Data: data})
	if err != nil {
		return 0, err
	}
	seq, err := pa.Wait(ctx)
	if !answered(ctx, err) {
		return seq, err
	}
	return kv.Create(ctx, key, data)
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
