package jsapi

import (
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
