// Package senderlease keeps the sender leases: which batch holds which of
// a domain's senders. Processors lease a sender for a step that needs one
// (Acquire); authz frees it when the batch ends (Release).
//
// A domain's sender pool is one record of the senders bucket, key
// "<domain>": every sender the processors were configured with, free or
// leased to one batch (streams.SenderPool). Every lease and release is one
// compare-and-set of that record (streams.UpdateKV), so a sender is never
// leased twice, a batch finds its lease again by its id after any crash,
// and a release is idempotent. Pools are small (a handful of accounts) and
// a lease changes twice per batch, so one record per domain is no hot spot
// worth splitting. Each lease names its batch's submitter, so the
// compare-and-set that grants a lease also keeps each submitter to its
// share of the pool (Lease.Share): one submitter's batches never hold
// every sender.
package senderlease
