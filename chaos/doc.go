// Package chaos is tickflow's chaos suite: it builds the commands once,
// runs the system as separate OS processes (nats-server, authz, two
// processors, two workers, the ticker) on loopback, submits batches through
// authz as a client would, kills and restarts processes and servers at
// random moments, and at the end checks what must hold whatever happened:
//
//   - every accepted batch has exactly one terminal callback and a terminal
//     record that agrees with it and with the outcome its functions call for;
//   - no function that took effect ran twice, except where a worker died
//     between the handler's effect and its completion record, the one case
//     the worker documents, which is counted apart;
//   - no progress record short of done, worker claim, concurrency slot or
//     queue token is left behind for a terminal batch;
//   - dead letters exist exactly for the batches that failed.
//
// The workers run the Recorder handler (function type "chaos.record"),
// which appends every execution to a file and syncs it before returning,
// so the executions are known even for a worker killed right after.
//
// `make chaos` runs every scenario (cmd/chaos); TestChaosShort runs the
// process-kill scenarios briefly inside `go test`.
package chaos
