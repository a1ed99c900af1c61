// Package tickflow is a distributed processing pipeline on NATS JetStream.
//
// Callers hand message batches to an authorization service (package authz,
// reached through package client), the only gate onto the queues;
// processors (package processor) execute them one step per tick, High
// priority before Med, atomically or function by function, with retries,
// confirmations from outside, dead letters and a callback for every
// outcome; workers (package worker) run the functions, which are handlers
// written against package pipeline. Package local runs all of it in one
// process on an embedded nats-server.
//
// This package holds what every part shares: the nats.conf that defines the
// identities and their permissions.
package tickflow

import _ "embed"

// NATSConfig is the project's nats.conf: the accounts, the users of every
// role (authz, processor, worker, ticker, admin, owner, and the example
// callers alice, bob and oracle, each with the password "local-<user>") and
// what each may publish and subscribe to. embedded.Options.Config takes it.
//
//go:embed nats.conf
var NATSConfig string
