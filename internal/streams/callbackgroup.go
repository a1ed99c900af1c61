package streams

import (
	"errors"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/wire"
)

// KindCallbacks is the HeaderKind of a records.CallbackGroup's message.
const KindCallbacks = "callbacks"

// Headers of a records.CallbackGroup's message, so that `nats stream view` says
// what it holds.
const (
	// HeaderCount is how many callbacks the group holds.
	HeaderCount = "Count"
	// HeaderFirstBatchID and HeaderLastBatchID are its first and last
	// members' batch ids.
	HeaderFirstBatchID = "First-Batch-Id"
	HeaderLastBatchID  = "Last-Batch-Id"
)

// CallbackGroupMsg builds the message of a group of terminal callbacks of
// domain, with readable headers. It has no deduplication id: one per
// member cannot be given, so a member may be stored again after a crash
// (in another group, or alone), and authz applies a batch's first
// callback only (see docs/architecture.md).
func CallbackGroupMsg(domain string, cbs []records.Callback) (*nats.Msg, error) {
	msgs := make([]*nats.Msg, len(cbs))
	for i := range cbs {
		m, err := CallbackMsg(&cbs[i])
		if err != nil {
			return nil, err
		}
		msgs[i] = m
	}
	return JoinCallbacks(domain, msgs)
}

// JoinCallbacks joins single callback messages of domain (CallbackMsg's)
// into one records.CallbackGroup message, as CallbackGroupMsg builds it, from
// their bodies as they are: nothing is decoded or encoded again. The
// members keep their order.
func JoinCallbacks(domain string, msgs []*nats.Msg) (*nats.Msg, error) {
	if len(msgs) == 0 {
		return nil, errors.New("streams: a callback group needs at least one callback")
	}
	size := records.CallbackGroupOverhead
	for _, m := range msgs {
		size += len(m.Data)
	}
	b := make([]byte, 0, size)
	b = wire.AppendMapHeader(b, 2)
	b = wire.AppendUint8(wire.AppendString(b, "v"), records.WireVersion)
	b = wire.AppendArrayHeader(wire.AppendString(b, "callbacks"), len(msgs))
	for _, m := range msgs {
		b = append(b, m.Data...)
	}
	g := nats.NewMsg(CallbackSubject(domain))
	g.Data = b
	g.Header.Set(HeaderKind, KindCallbacks)
	g.Header.Set(HeaderDomain, domain)
	g.Header.Set(HeaderCount, strconv.Itoa(len(msgs)))
	g.Header.Set(HeaderFirstBatchID, msgs[0].Header.Get(HeaderBatchID))
	g.Header.Set(HeaderLastBatchID, msgs[len(msgs)-1].Header.Get(HeaderBatchID))
	return g, nil
}

// CallbacksIn is how many batches' callbacks a message on a callback
// subject with headers h carries, from its headers alone: a group's Count,
// and one for a single callback (or a group whose count does not read).
func CallbacksIn(h nats.Header) int {
	if h.Get(HeaderKind) == KindCallbacks {
		if n, err := strconv.Atoi(h.Get(HeaderCount)); err == nil && n > 0 {
			return n
		}
	}
	return 1
}
