// Package jsapi is the JetStream API spoken on the wire, where nats.go's
// jetstream handles cost too much on a hot path: fetches without a
// subscription per request (Fetcher), pipelined publishes awaiting their
// PubAcks (AckPublisher), direct gets (KVGetMsg, ReadDirectGet), KV
// compare-and-set writes (KVUpdateMsg) and the ack metadata of consumed
// messages (DeliveryOf).
//
// It knows JetStream's subjects and answers, not tickflow's: stream, bucket
// and key names are passed in, and it imports no other package of the
// module (internal/streams, the protocol, builds on it).
package jsapi
