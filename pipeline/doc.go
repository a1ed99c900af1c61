// Package pipeline holds tickflow's domain: batches and their functions, the
// retry logic shared by batches and functions, the outcomes a batch can reach,
// and the handler contract workers serve.
//
// pipeline never imports nats.go: everything here can be tested without a
// server, and the JetStream wiring lives in package streams.
//
// # Handlers and idempotency
//
// A Handler executes one function of a batch. A function whose completion
// was recorded is never executed again: the worker records each successful
// call (batch, function, round) before it answers, and answers a repeated
// call from that record, whichever process dies or whatever reply is lost
// afterwards. A handler can still run twice for one effect in one case: its
// worker dies after the handler's effect and before the record is written
// (or the handler ignores its context and runs past the call's claim). So a
// handler whose effect reaches outside the system (a payment, an email, a
// row in another database) must make that effect idempotent under
// Call.IdempotencyKey: pass it as an HTTP API's Idempotency-Key, keep it in
// a unique column, or check it before acting, as the ledger in
// examples/handlers does.
//
// The key is "<batch>/<index>". It is the same on every attempt of the
// function: retries after an error, a call repeated after a timeout or a
// lost reply, a call another worker takes over, and the function's
// fallback (a fallback whose effect differs from its function's should
// derive its own key, such as the key plus "/fallback"). It changes ("<batch>/<index>/<round>") only when the function's
// effect took place and was then invalidated by a failed or missing
// confirmation: the next round asks for the effect anew.
package pipeline
