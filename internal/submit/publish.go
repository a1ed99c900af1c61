package submit

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
)

// Ack is what a stream answered to a stored message.
type Ack = jsapi.PubAck

// Publish stores m on its stream and returns the stream's acknowledgement:
// jetstream's PublishMsg, with the acknowledgement the server writes from
// its template ({"stream":…,"seq":…}) read without reflection. A submit
// waits for two of them, and encoding/json cost as much as the rest of the
// client's publish. An answer that is not such an acknowledgement stored
// nothing (an error, or no stream listening); the message is then
// published again through jetstream's PublishMsg, which retries a stream
// that is not there yet and words the error (errors.Is matches jetstream's
// sentinels). Publish does not modify m.
func Publish(ctx context.Context, js jetstream.JetStream, m *nats.Msg) (Ack, error) {
	ctx, cancel := withDeadline(ctx, js)
	defer cancel()
	resp, err := js.Conn().RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
	case err != nil:
		return Ack{}, err
	default:
		if a, err := jsapi.ReadPubAck(resp); err == nil {
			return a, nil
		}
	}
	pa, err := js.PublishMsg(ctx, m)
	if err != nil {
		return Ack{}, err
	}
	return Ack{Seq: pa.Sequence, Duplicate: pa.Duplicate}, nil
}

// withDeadline bounds a ctx without a deadline by js's default timeout,
// as jetstream does for its own publishes: a publish the server drops
// (one it refuses for permissions, say) is answered by no one.
func withDeadline(ctx context.Context, js jetstream.JetStream) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, js.Options().DefaultTimeout)
}

// createHeader makes a KV write a create: the key must have no revision.
// Shared and never modified: publishing only reads a message's header.
var createHeader = nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}
