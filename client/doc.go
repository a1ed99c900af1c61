// Package client is the Go client of the authz API: one method per
// operation, each taking its request type of package api and returning its
// typed reply. The types are api's alone, not re-exported here: import api
// to name them.
//
// A Client speaks as one user over a connection made as that user, with the
// user's own inbox prefix (conn.Dial sets it): nats.conf
// lets a user publish only on authz.<user>.… and authz answers only into
// _INBOX_<user>.…, so New refuses a connection whose inbox prefix is not the
// user's.
//
// Errors. An error reply of authz is an *Error carrying its code, message
// and operation; use errors.As to read them, and errors.Is against the code
// sentinels (ErrNotFound, ErrForbidden, …) to test for a kind:
//
//	_, err := c.Batch(ctx, api.IDRequest{ID: id})
//	if errors.Is(err, client.ErrNotFound) { … }
//	var ae *client.Error
//	if errors.As(err, &ae) { log.Print(ae.Code, ae.Message) }
//
// A request nobody answers in time matches ErrNoAnswer: the server drops a
// publish its permissions deny (it reports it only asynchronously, to the
// connection's error handler), so a denied request looks like a timeout.
// ErrNotRunning (which also matches nats.ErrNoResponders) says no authz
// replica is serving. A request refused before it was sent, because it
// could not be valid, matches ErrInvalid.
//
// Sends at once. Send keeps at most Config.SendsInFlight requests in
// flight for plain batches (no key or schedule; an idempotency key or
// none); the plain
// Sends beyond them wait in the client and go out together, as one
// send_many request, as soon as one of those is answered, each answered as
// its own send would be. A Send that finds a request free goes out alone
// at once while at most half of them are taken; beyond half it first
// yields the processor once and takes along the Sends that came meanwhile.
//
// Retries. The client does not retry (beyond sending alone the batches of
// a group that authz did not submit: a group refused whole for the send
// rate, or batches it did not start after a failure inside it). ErrNotRunning and ErrUnavailable (a
// replica that was stopping; nothing was done) are safe to retry for every
// operation. After ErrNoAnswer the request may or may not have been done:
// Send with an IdempotencyKey is safe to retry (the repeat returns the same
// batch, with Duplicate set), and so are Batch, Queue, DLQ, Pause, Resume,
// Reload, Domains, InFlight, List, Purge and Replay (a dead letter replays as the
// same new batch), and Cancel (a repeat answers as the first did); Evict
// and Insert act on positions and are not.
package client
