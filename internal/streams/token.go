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
	return markedTokenMsg(subject, records.Token{BatchID: b.ID, Gen: gen, Rotation: rotation}, b)
}

// FirstTokenAgainMsg builds the first token of batch b (generation and
// rotation 0) on subject, with its deduplication id, for a path that may
// publish it beside one stored before (a repeat, the repair loop, authz's
// start, a key's head): marked records.Token.Again, so that its step reads
// the batch's progress even on its first delivery.
func FirstTokenAgainMsg(subject string, b *pipeline.Batch) (*nats.Msg, error) {
	return markedTokenMsg(subject, records.Token{BatchID: b.ID, Again: true}, b)
}

func markedTokenMsg(subject string, tok records.Token, b *pipeline.Batch) (*nats.Msg, error) {
	m, err := tokenMsg(subject, tok, b)
	if err != nil {
		return nil, err
	}
	m.Header.Set(nats.MsgIdHdr, TokenMsgID(b.ID, tok.Gen, tok.Rotation))
	return m, nil
}

// NewTokenMsg builds the first token of a new batch b (generation and
// rotation 0) on subject, as TokenMsg does but without a deduplication id:
// the server keeps no entry for it in its duplicate window, which costs
// about as much as the rest of the token's store. Only for the first
// publish of a send's own batch without an idempotency key, a key or a
// run_at, soon after its record. A copy of it can still be stored (the
// repair loop after a PubAck that never came, an authz start racing a
// send): every path that publishes a first token again does so with
// FirstTokenAgainMsg, after the send's own, and a marked token's step
// reads the progress.
func NewTokenMsg(subject string, b *pipeline.Batch) (*nats.Msg, error) {
	return tokenMsg(subject, records.Token{BatchID: b.ID}, b)
}

// tokenMsg builds the message of tok, with a copy of batch b unless that
// makes it too large, and readable headers.
func tokenMsg(subject string, tok records.Token, b *pipeline.Batch) (*nats.Msg, error) {
	gen, rotation := tok.Gen, tok.Rotation
	tok.Batch = b
	data, err := records.Encode(&tok)
	if err == nil && len(data) > MaxTokenBatch {
		tok.Batch = nil
		data, err = records.Encode(&tok)
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
