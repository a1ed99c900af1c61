// Package records is tickflow's wire records and their codecs: the
// queue token, a batch's progress and authz's batch record, the terminal
// callback and the group of callbacks, the dead letter, the confirmation,
// the work request and reply and the worker's completion records, and the
// values of the other buckets (key orders, sender pools, schedule states,
// throttle windows, presence, domain states).
//
// A record is pure data: a struct whose encoding is what travels on a
// stream or sits under a key, with nothing about where. Those bytes are
// the wire, read by every replica of every version still running and by
// records stored long ago: the msgpack records carry WireVersion, the
// hot-path ones a hand-written codec that writes exactly what msgpack's
// reflection writes for their tags, and the golden files under testdata
// pin them (a change that moves a byte is a wire change, never a
// refactoring). Encode and Decode read and write any of them; Decode
// never panics and refuses another version with ErrVersion.
//
// It imports internal/wire and pipeline only, no NATS package: the
// subjects, keys and buckets these records live under, the messages that
// carry them and the reads and writes of the buckets are
// internal/streams'.
package records
