// Package streams is the one place in tickflow that knows JetStream: the
// streams, consumers and KV buckets declared as data, the subject builders,
// idempotent provisioning, client connections, and the msgpack wire records
// (tokens, progress, callbacks, dead letters, work requests).
//
// No subject or resource name is written as a literal outside this package.
// The JetStream API it speaks below jetstream's handles (fetches,
// pipelined publishes, direct gets, ack metadata) is internal/jsapi's,
// which takes its names from here.
package streams
