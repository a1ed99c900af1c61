// Package permtest proves the permissions of the project's nats.conf
// against a real nats-server started from it: for every role (admin, authz,
// processor, worker, ticker, owner, alice, bob, oracle) and every boundary,
// what the role may do succeeds and what it may not is denied by the server.
//
// It holds tests only. A denied publish or request does not fail on the
// client: the server drops it and reports a "Permissions Violation" to the
// connection's asynchronous error handler, and the request times out. The
// tests therefore wait for that report, naming the subject, and cut the
// request short as soon as it arrives; for denied publishes into a stream
// they also check that the stream did not grow.
//
// Run them with
//
//	go test -race ./internal/permtest/
package permtest
