package streams

import (
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/pipeline"
)

// MaxTokenBatch is the largest encoded token that carries a copy of its
// batch; a larger batch's token carries only its id, and processors read
// the batch record instead.
const MaxTokenBatch = 4 << 10

// TokenMsg builds the queue message pointing at batch b at generation gen
// and rotation, on subject, with readable headers and a deduplication id.
func TokenMsg(subject string, b *pipeline.Batch, gen, rotation uint32) (*nats.Msg, error) {
	data, err := Encode(&Token{BatchID: b.ID, Gen: gen, Rotation: rotation, Batch: b})
	if err == nil && len(data) > MaxTokenBatch {
		data, err = Encode(&Token{BatchID: b.ID, Gen: gen, Rotation: rotation})
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
	m.Header.Set(nats.MsgIdHdr, TokenMsgID(b.ID, gen, rotation))
	return m, nil
}

// CallbackMsg builds the terminal callback message of a batch, with
// readable headers and the batch's callback deduplication id.
func CallbackMsg(cb *Callback) (*nats.Msg, error) {
	data, err := Encode(cb)
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
