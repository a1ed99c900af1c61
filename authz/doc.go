// Package authz is the authorization service: the only gate onto the
// queues. It checks each submission against the authorization table,
// assigns global batch ids, records every batch, publishes queue tokens,
// gives the owner pause/resume, evict/insert and replay, and applies the
// processors' callbacks to the batch records.
package authz
