// Package streams is the one place in tickflow that knows JetStream: the
// streams, consumers and KV buckets declared as data, the subject and key
// builders, idempotent provisioning, client connections, the messages that
// carry the wire records (tokens, callbacks, groups of callbacks, with
// their headers), and the persistence protocols over the buckets (progress,
// throttle, presence, compare-and-set updates). The records themselves and
// their codecs are internal/records'.
//
// No subject or resource name is written as a literal outside this package.
// The JetStream API it speaks below jetstream's handles (fetches,
// pipelined publishes, direct gets, ack metadata) is internal/jsapi's,
// which takes its names from here.
package streams
