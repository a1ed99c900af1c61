// Package pipeline holds tickflow's domain: batches and their functions, the
// retry logic shared by batches and functions, the outcomes a batch can reach,
// and the handler contract workers serve.
//
// pipeline never imports nats.go: everything here can be tested without a
// server, and the JetStream wiring lives in package streams.
package pipeline
