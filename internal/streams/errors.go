package streams

import "errors"

// ErrSettings is matched by errors from Settings.Validate.
var ErrSettings = errors.New("streams: invalid settings")

// ErrVersion is returned when a wire record carries a version this build does not read.
var ErrVersion = errors.New("streams: unsupported wire version")

// ErrDecode is matched by every error decoding a wire record.
var ErrDecode = errors.New("streams: cannot decode")

// ErrReplyRefused is returned by CheckReply and Reply for a reply subject
// that is not an inbox: a service does not publish where a caller points it.
var ErrReplyRefused = errors.New("streams: reply subject refused: not an inbox")

// ErrConflict is matched by a compare-and-set write that another writer won:
// read again and retry (UpdateKV does).
var ErrConflict = errors.New("streams: changed concurrently")

// ErrPubAckTimeout is matched by a wait for a PubAck (PendingAck.Wait) that
// gave up: the message may or may not have been stored.
var ErrPubAckTimeout = errors.New("streams: no PubAck in time")

// ErrNoValue is matched by a direct get (ReadDirectGet) that found no
// message, or a KV key whose last revision is a delete or purge marker.
var ErrNoValue = errors.New("streams: no value stored")
