package streams

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

// MaxTokenBatch is the largest encoded token that carries a copy of its
// batch; a larger batch's token carries only its id, and processors read
// the batch record instead.
const MaxTokenBatch = 4 << 10

// TokenMsg builds the queue message pointing at batch b at generation gen
// and rotation, on subject, with readable headers and a deduplication id.
func TokenMsg(subject string, b *pipeline.Batch, gen, rotation uint32) (*nats.Msg, error) {
	m, err := tokenMsg(subject, b, gen, rotation)
	if err != nil {
		return nil, err
	}
	m.Header.Set(nats.MsgIdHdr, TokenMsgID(b.ID, gen, rotation))
	return m, nil
}

// NewTokenMsg builds the first token of a new batch b (generation and
// rotation 0) on subject, as TokenMsg does but without a deduplication id:
// the server keeps no entry for it in its duplicate window, which costs
// about as much as the rest of the token's store. Only for a token that no
// path publishes again while the first may still be queued: a new batch
// without an idempotency key, a key or a run_at, published by the send
// that recorded it. Every other path republishes (a repeat, the repair
// loop, an authz start) with TokenMsg, and an authz start queues again only
// a batch it found neither queued nor run (see authz's resume).
func NewTokenMsg(subject string, b *pipeline.Batch) (*nats.Msg, error) {
	return tokenMsg(subject, b, 0, 0)
}

func tokenMsg(subject string, b *pipeline.Batch, gen, rotation uint32) (*nats.Msg, error) {
	data, err := records.Encode(&records.Token{BatchID: b.ID, Gen: gen, Rotation: rotation, Batch: b})
	if err == nil && len(data) > MaxTokenBatch {
		data, err = records.Encode(&records.Token{BatchID: b.ID, Gen: gen, Rotation: rotation})
	}
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(HeaderBatchID, strconv.FormatUint(b.ID, 10))
	m.Header.Set(HeaderDomain, b.Domain)
	m.Header.Set(HeaderKind, string(b.Subroutine.Mode))
	m.Header.Set(HeaderPriority, string(b.Priority))
	m.Header.Set(HeaderGen, strconv.FormatUint(uint64(gen), 10))
	m.Header.Set(HeaderStep, strconv.FormatUint(uint64(rotation), 10))
	return m, nil
}

// ScheduleMsg builds the schedule of batch b, which has a RunAt: its first
// token, on b's ScheduleSubject, which the server publishes to DueSubject
// at RunAt rounded up to the whole second (the schedule's resolution), so
// never before it. Its deduplication id is the first token's: a repeated
// publish within the window is dropped, and one after it replaces the
// schedule (one per subject).
func ScheduleMsg(b *pipeline.Batch) (*nats.Msg, error) {
	m, err := TokenMsg(ScheduleSubject(b.Priority, b.Domain, b.ID), b, 0, 0)
	if err != nil {
		return nil, err
	}
	m.Header.Set(jetstream.ScheduleHeader, "@at "+ScheduleTime(b.RunAt).Format(time.RFC3339))
	m.Header.Set(jetstream.ScheduleTargetHeader, DueSubject)
	return m, nil
}

// ScheduleTime is when the schedule of a batch with RunAt t fires: t
// rounded up to the whole second, UTC.
func ScheduleTime(t time.Time) time.Time {
	u := t.UTC()
	if r := u.Truncate(time.Second); !r.Equal(u) {
		return r.Add(time.Second)
	}
	return u
}

// CallbackMsg builds the terminal callback message of a batch, with
// readable headers and the batch's callback deduplication id.
func CallbackMsg(cb *records.Callback) (*nats.Msg, error) {
	data, err := records.Encode(cb)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(CallbackSubject(cb.Domain))
	m.Data = data
	m.Header.Set(HeaderBatchID, strconv.FormatUint(cb.BatchID, 10))
	m.Header.Set(HeaderDomain, cb.Domain)
	m.Header.Set(HeaderOutcome, cb.Outcome.String())
	m.Header.Set(nats.MsgIdHdr, CallbackMsgID(cb.BatchID))
	return m, nil
}
