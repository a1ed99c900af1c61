package streams

import (
	"strconv"

	"github.com/nats-io/nats.go"
)

// SubmittedLastMsg is a direct get of the last entry of user's subject
// of StreamSubmitted, to send with jsapi.AckPublisher.Request;
// jsapi.ReadDirectGet reads its answer.
func SubmittedLastMsg(user string) *nats.Msg {
	return nats.NewMsg("$JS.API.DIRECT.GET." + StreamSubmitted + "." + SubmittedSubject(user))
}

// SubmittedSeqMsg is a direct get of the message at sequence seq of
// StreamSubmitted, whatever its subject: the reader checks it is the
// subject it expects (the answer's jetstream.SubjectHeader).
func SubmittedSeqMsg(seq uint64) *nats.Msg {
	m := nats.NewMsg("$JS.API.DIRECT.GET." + StreamSubmitted)
	m.Data = []byte(`{"seq":` + strconv.FormatUint(seq, 10) + `}`)
	return m
}
