// Package keyorder is the per-key sequencer: the order of the batches
// waiting on one key of a domain, kept in the keys bucket with
// compare-and-set (Store). authz lists a keyed batch in its key's order
// when it accepts it, gives a queue token only to the key's head, and takes
// the batch off when it ends; the record itself is streams.KeyQueue.
package keyorder
