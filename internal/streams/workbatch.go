package streams

import (
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkUnitsSubject is the worker endpoint for several atomic units in one
// request (WorkBatch): one round trip for a wave of steps instead of one
// per unit.
const WorkUnitsSubject = "work.units"

// WorkBatch asks a worker to run several atomic units, each exactly as a
// request on WorkUnitSubject would run it: its own completion key, claim
// and record.
type WorkBatch struct {
	V     uint8         `msgpack:"v"`
	Units []WorkRequest `msgpack:"units"`
}

// WorkBatchReply answers a WorkBatch: one reply per unit, in its order.
type WorkBatchReply struct {
	V       uint8       `msgpack:"v"`
	Replies []WorkReply `msgpack:"replies"`
}

func (w *WorkBatch) version() uint8      { return w.V }
func (w *WorkBatch) setVersion()         { w.V = WireVersion }
func (w *WorkBatchReply) version() uint8 { return w.V }
func (w *WorkBatchReply) setVersion()    { w.V = WireVersion }

// KVUpdateMsg is the message that writes value under key of bucket with
// compare-and-set on revision rev (0: the key must never have been
// written), as jetstream.KeyValue.Update writes it. Published with
// PublishMsgAsync, several such writes are pipelined instead of waiting a
// round trip each; a lost race fails with an error IsRevisionConflict
// recognises.
func KVUpdateMsg(bucket, key string, value []byte, rev uint64) *nats.Msg {
	m := nats.NewMsg("$KV." + bucket + "." + key)
	m.Data = value
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	return m
}

// IsRevisionConflict says whether err is a compare-and-set write that lost
// its race: the key's revision was not the one expected.
func IsRevisionConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
