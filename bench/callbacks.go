package main

import (
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// callbacksIn is how many batches' terminal callbacks m, a message on
// callbacks.>, carries (streams.CallbacksIn): only its headers are read, so
// counting costs the process next to nothing beside what it measures.
func callbacksIn(m *nats.Msg) uint64 {
	return uint64(streams.CallbacksIn(m.Header))
}

// callbackIDs are the batch ids of the callbacks m carries (nil when its
// body does not decode).
func callbackIDs(m *nats.Msg) []uint64 {
	cbs, _, err := records.DecodeCallbacks(m.Data)
	if err != nil {
		return nil
	}
	ids := make([]uint64, len(cbs))
	for i := range cbs {
		ids[i] = cbs[i].BatchID
	}
	return ids
}

// countCallbacks subscribes admin to callbacks.> and adds to n the batches
// whose callback each message carries (callbacksIn). It returns the
// subscription; the count is complete for every message the server
// delivered before a Flush of admin.
func countCallbacks(admin *nats.Conn, n *atomic.Uint64) (*nats.Subscription, error) {
	sub, err := admin.Subscribe(streams.CallbackSubject("*"), func(m *nats.Msg) { n.Add(callbacksIn(m)) })
	if err != nil {
		return nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	if err := admin.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	return sub, nil
}
