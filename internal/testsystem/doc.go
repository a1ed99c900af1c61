// Package testsystem runs tickflow inside a test: a real nats-server in the
// test process (internal/testnats, loaded from the project's nats.conf),
// provisioned, with the components the commands run (authz, workers, a
// processor per domain, the dashboard), each connected as its own
// nats.conf user. Every package's tests start their system here and keep
// only what is their own: the table, the handlers, the assertions.
//
// The processors are built but not run: a test ticks them, so that no step
// happens without a tick it asked for. StopUnderLoad's helpers serve the
// tests that stop a component with a burst of requests queued in its
// client.
package testsystem
