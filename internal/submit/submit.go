// Package submit holds the writes that put a batch on a queue: taking a
// global batch id, recording the batch and publishing its token. They apply
// no authorization and no concurrency limit, so they are not public: authz
// calls them after its checks, and tests call them to queue batches
// directly.
package submit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// AssignID takes a global batch id: the first of the block of ids of a new
// message in the id log (IDs hands out the others), unique across every
// authz replica and increasing with the log. A dedupKey seen within the
// log's duplicate window returns the same id with dup set.
func AssignID(ctx context.Context, js jetstream.JetStream, dedupKey string) (id uint64, dup bool, err error) {
	m := nats.NewMsg(streams.IDsSubject)
	if dedupKey != "" {
		m.Header.Set(nats.MsgIdHdr, dedupKey)
	}
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		return 0, false, fmt.Errorf("submit: assign batch id: %w", err)
	}
	return ack.Sequence * IDsPerSequence, ack.Duplicate, nil
}

// Record stores b as InProcess under its id. If a record exists already and
// dup says the id was handed out twice for the same submission, the first
// record's batch is returned; otherwise an existing record is an error
// matching jetstream.ErrKeyExists.
func Record(ctx context.Context, kv jetstream.KeyValue, b *pipeline.Batch, idemKey string, dup bool) (*pipeline.Batch, error) {
	first, _, err := Create(ctx, kv, b, idemKey, dup)
	return first, err
}

// Created is a record Create wrote: its encoding as written, at the
// revision it was written at.
type Created struct {
	Data []byte
	Rev  uint64
}

// NewRecord is the record of a batch just accepted: InProcess, with its
// history's first event.
func NewRecord(b *pipeline.Batch, idemKey string) *records.BatchRecord {
	rec := &records.BatchRecord{
		Batch: *b, Status: pipeline.InProcess, IdempotencyKey: idemKey,
		CreatedAt: b.CreatedAt, UpdatedAt: b.CreatedAt,
		History: []records.Event{{At: b.CreatedAt, What: "accepted", Detail: string(b.Priority) + " queue of " + b.Domain}},
	}
	if b.ReplayOf != 0 {
		rec.History = append(rec.History, records.Event{At: b.CreatedAt, What: "replay", Detail: fmt.Sprintf("replay of batch %d", b.ReplayOf)})
	}
	if !b.RunAt.IsZero() {
		rec.History = append(rec.History, records.Event{At: b.CreatedAt, What: "scheduled", Detail: "runs at " + b.RunAt.UTC().Format(time.RFC3339Nano)})
	}
	return rec
}

// Create is Record that also returns the record it created and its
// revision (nil when the batch was recorded before).
func Create(ctx context.Context, kv jetstream.KeyValue, b *pipeline.Batch, idemKey string, dup bool) (*pipeline.Batch, *Created, error) {
	return create(ctx, kv, b, idemKey, dup, func(ctx context.Context, key string, data []byte) (uint64, error) {
		return kv.Create(ctx, key, data)
	})
}

func create(ctx context.Context, kv jetstream.KeyValue, b *pipeline.Batch, idemKey string, dup bool, write func(context.Context, string, []byte) (uint64, error)) (*pipeline.Batch, *Created, error) {
	rec := NewRecord(b, idemKey)
	data, err := records.Encode(rec)
	if err != nil {
		return nil, nil, err
	}
	rev, err := write(ctx, streams.BatchKey(b.ID), data)
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) || !dup {
			return nil, nil, fmt.Errorf("submit: record batch %d: %w", b.ID, err)
		}
		first, err := Stored(ctx, kv, b.ID)
		if err != nil {
			return nil, nil, err
		}
		return first, nil, nil
	}
	return b, &Created{Data: data, Rev: rev}, nil
}

// Stored reads the batch recorded under id.
func Stored(ctx context.Context, kv jetstream.KeyValue, id uint64) (*pipeline.Batch, error) {
	e, err := kv.Get(ctx, streams.BatchKey(id))
	if err != nil {
		return nil, fmt.Errorf("submit: read batch %d: %w", id, err)
	}
	first, err := records.Decode[records.BatchRecord](e.Value())
	if err != nil {
		return nil, err
	}
	return &first.Batch, nil
}

// Enqueue validates b, assigns it the next global id, records it and
// publishes its token: the record first, so a token never points at
// nothing. b.ID and b.CreatedAt are set. It applies no authorization and no
// concurrency limit.
//
// idemKey, when set, makes a repeated call within the duplicate window
// return the same id and queue nothing twice; the repeated call re-publishes
// the same (deduplicated) token, which also completes a submission cut short
// by a crash.
func Enqueue(ctx context.Context, js jetstream.JetStream, b *pipeline.Batch, idemKey string, now time.Time) (uint64, error) {
	if err := b.Validate(); err != nil {
		return 0, err
	}
	dedup := ""
	if idemKey != "" {
		dedup = "idem-" + idemKey
	}
	id, dup, err := AssignID(ctx, js, dedup)
	if err != nil {
		return 0, err
	}
	b.ID, b.CreatedAt = id, now.UTC()
	kv, err := js.KeyValue(ctx, streams.BucketBatches)
	if err != nil {
		return 0, fmt.Errorf("submit: batches bucket: %w", err)
	}
	first, err := Record(ctx, kv, b, idemKey, dup)
	if err != nil {
		return 0, err
	}
	*b = *first
	if err := PublishToken(ctx, js, b, 0, 0); err != nil {
		return 0, err
	}
	return b.ID, nil
}

// PublishToken publishes the token of b at generation gen and step on the
// batch's own token subject, deduplicated by (id, gen, step).
func PublishToken(ctx context.Context, js jetstream.JetStream, b *pipeline.Batch, gen, step uint32) error {
	return publishToken(ctx, b, gen, step, func(m *nats.Msg) (Ack, error) { return Publish(ctx, js, m) })
}

// PublishFirstAgain publishes the first token of b (generation and step 0)
// for a path that may publish it beside one stored before (a repeat, the
// repair loop, authz's start, a key's head): deduplicated by (id, 0, 0)
// within the window, and marked so that its step reads the batch's
// progress (streams.FirstTokenAgainMsg).
func PublishFirstAgain(ctx context.Context, js jetstream.JetStream, b *pipeline.Batch) error {
	m, err := againTokenMsg(ctx, b)
	if err != nil {
		return err
	}
	return queued(b, m, func(m *nats.Msg) (Ack, error) { return Publish(ctx, js, m) })
}

// publishToken builds the token of b (with ctx's trace) and publishes it.
func publishToken(ctx context.Context, b *pipeline.Batch, gen, step uint32, publish func(*nats.Msg) (Ack, error)) error {
	m, err := tokenMsg(ctx, b, gen, step)
	if err != nil {
		return err
	}
	return queued(b, m, publish)
}

// queued publishes token m of batch b and words a failure.
func queued(b *pipeline.Batch, m *nats.Msg, publish func(*nats.Msg) (Ack, error)) error {
	if _, err := publish(m); err != nil {
		return fmt.Errorf("submit: queue batch %d: %w", b.ID, err)
	}
	return nil
}

// tokenMsg is the token of b at generation gen and step, on the batch's
// own token subject, with ctx's trace.
func tokenMsg(ctx context.Context, b *pipeline.Batch, gen, step uint32) (*nats.Msg, error) {
	return traced(ctx, b, func(subject string, b *pipeline.Batch) (*nats.Msg, error) {
		return streams.TokenMsg(subject, b, gen, step)
	})
}

// againTokenMsg is the first token of b marked Again, with its
// deduplication id (streams.FirstTokenAgainMsg), with ctx's trace.
func againTokenMsg(ctx context.Context, b *pipeline.Batch) (*nats.Msg, error) {
	return traced(ctx, b, streams.FirstTokenAgainMsg)
}

// newTokenMsg is tokenMsg for the first publish of a fresh batch's first
// token: without a deduplication id (streams.NewTokenMsg).
func newTokenMsg(ctx context.Context, b *pipeline.Batch) (*nats.Msg, error) {
	return traced(ctx, b, streams.NewTokenMsg)
}

// traced is the token build makes of b on the batch's own token subject,
// with ctx's trace.
func traced(ctx context.Context, b *pipeline.Batch, build func(subject string, b *pipeline.Batch) (*nats.Msg, error)) (*nats.Msg, error) {
	m, err := build(streams.TokenSubject(b.Priority, b.Domain), b)
	if err != nil {
		return nil, err
	}
	telemetry.Inject(ctx, m.Header)
	return m, nil
}
