// Package streams is the one place in tickflow that knows JetStream: the
// streams, consumers and KV buckets declared as data, the subject builders,
// idempotent provisioning, client connections, and the msgpack wire records
// (tokens, progress, callbacks, dead letters, work requests).
//
// No subject or resource name is written as a literal outside this package.
package streams
