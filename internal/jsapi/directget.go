package jsapi

import (
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVGetMsg is a direct get of key's last revision in KV bucket bucket, to
// send with AckPublisher.Request so that several reads share a round trip;
// ReadKVGet reads its answer. The bucket must allow direct gets, as every
// bucket tickflow provisions does, and the identity must be allowed to
// publish to $JS.API.DIRECT.GET.KV_<bucket>.>.
func KVGetMsg(bucket, key string) *nats.Msg {
	return nats.NewMsg("$JS.API.DIRECT.GET.KV_" + bucket + ".$KV." + bucket + "." + key)
}

// ReadDirectGet reads the answer to a direct get of a stream's message:
// its data and sequence. No such message gives an error matching
// ErrNoValue; any other failure an error that says so.
func ReadDirectGet(m *nats.Msg) (data []byte, seq uint64, err error) {
	if m == nil {
		return nil, 0, fmt.Errorf("jsapi: direct get: no answer")
	}
	if st := m.Header.Get("Status"); st != "" {
		switch st {
		case "404":
			return nil, 0, ErrNoValue
		case "503":
			return nil, 0, jetstream.ErrNoStreamResponse
		}
		return nil, 0, fmt.Errorf("jsapi: direct get answered %s %s", st, m.Header.Get("Description"))
	}
	seq, err = strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
	if err != nil || seq == 0 {
		return nil, 0, fmt.Errorf("jsapi: direct get: answer without a sequence (%q)", m.Header.Get(jetstream.SequenceHeader))
	}
	return m.Data, seq, nil
}

// ReadKVGet reads the answer to a KVGetMsg: the value and its revision.
// A key never written, or whose last revision deletes or purges it, gives
// an error matching ErrNoValue; any other failure (no stream answered, a
// denied or malformed request) an error that says so.
func ReadKVGet(m *nats.Msg) (value []byte, rev uint64, err error) {
	if value, rev, err = ReadDirectGet(m); err != nil {
		return nil, 0, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, 0, ErrNoValue
	}
	return value, rev, nil
}
