// Package authz is the authorization service: the only gate onto the
// queues. It assigns global batch ids, records every batch, publishes queue
// tokens, and applies processors' callbacks to the batch records.
package authz

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// Enqueue validates b, assigns it the next global id, records it in the
// batches bucket as InProcess and publishes its token: the record first, so
// a token never points at nothing. b.ID and b.CreatedAt are set.
//
// idemKey, when set, makes a repeated submission return the same id and
// queue nothing twice: the id log deduplicates the key within the stream's
// duplicate window, and a repeated call re-publishes the same
// (deduplicated) token, which also completes a submission cut short by a crash.
func Enqueue(ctx context.Context, js jetstream.JetStream, b *pipeline.Batch, idemKey string, now time.Time) (uint64, error) {
	if err := b.Validate(); err != nil {
		return 0, err
	}
	idm := nats.NewMsg(streams.IDsSubject)
	if idemKey != "" {
		idm.Header.Set(nats.MsgIdHdr, "idem-"+idemKey)
	}
	ack, err := js.PublishMsg(ctx, idm)
	if err != nil {
		return 0, fmt.Errorf("authz: assign batch id: %w", err)
	}
	b.ID = ack.Sequence
	b.CreatedAt = now.UTC()
	kv, err := js.KeyValue(ctx, streams.BucketBatches)
	if err != nil {
		return 0, fmt.Errorf("authz: batches bucket: %w", err)
	}
	rec := &streams.BatchRecord{
		Batch: *b, Status: pipeline.InProcess, IdempotencyKey: idemKey,
		CreatedAt: b.CreatedAt, UpdatedAt: b.CreatedAt,
		History: []streams.Event{{At: b.CreatedAt, What: "accepted", Detail: string(b.Priority) + " queue of " + b.Domain}},
	}
	data, err := streams.Encode(rec)
	if err != nil {
		return 0, err
	}
	if _, err := kv.Create(ctx, streams.BatchKey(b.ID), data); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) || !ack.Duplicate {
			return 0, fmt.Errorf("authz: record batch %d: %w", b.ID, err)
		}
		// A repeated submission: keep the first record, re-publish its token.
		e, err := kv.Get(ctx, streams.BatchKey(b.ID))
		if err != nil {
			return 0, fmt.Errorf("authz: read batch %d: %w", b.ID, err)
		}
		first, err := streams.Decode[streams.BatchRecord](e.Value())
		if err != nil {
			return 0, err
		}
		*b = first.Batch
	}
	if err := PublishToken(ctx, js, b, 0, 0); err != nil {
		return 0, err
	}
	return b.ID, nil
}

// PublishToken publishes the token of b at generation gen and step on the
// batch's own token subject, deduplicated by (id, gen, step).
func PublishToken(ctx context.Context, js jetstream.JetStream, b *pipeline.Batch, gen, step uint32) error {
	m, err := streams.TokenMsg(streams.TokenSubject(b.Priority, b.Domain, b.ID), b, gen, step)
	if err != nil {
		return err
	}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("authz: queue batch %d: %w", b.ID, err)
	}
	return nil
}
