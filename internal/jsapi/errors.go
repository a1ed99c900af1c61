package jsapi

import "errors"

// ErrFetchNoAnswer ends a fetch whose answer fell silent: a consumer at
// its MaxAckPending, or an answer lost with the connection.
var ErrFetchNoAnswer = errors.New("the server did not answer the fetch (the consumer may be at its max ack pending)")

// ErrPubAckTimeout is matched by a wait for a PubAck (PendingAck.Wait) that
// gave up: the message may or may not have been stored.
var ErrPubAckTimeout = errors.New("jsapi: no PubAck in time")

// ErrNoValue is matched by a direct get (ReadDirectGet) that found no
// message, or a KV key whose last revision is a delete or purge marker.
var ErrNoValue = errors.New("jsapi: no value stored")
