package records

import "time"

// KeyQueue is the order of one key of a domain, key streams.KeyQueueKey(domain,
// key) of the keys bucket: the batches carrying that key that are not
// terminal yet, in the order authz accepted them. Package keyorder keeps
// it (keyorder.Store). The first is the key's
// head, the only one of them with a queue token; the others get theirs
// when they become the head. A key with no batch waiting has no entry.
type KeyQueue struct {
	V      uint8  `msgpack:"v" json:"v"`
	Domain string `msgpack:"domain" json:"domain"`
	Key    string `msgpack:"key" json:"key"`
	// IDs are the waiting batches, the head first.
	IDs []uint64 `msgpack:"ids" json:"ids"`
	// By are the submitters of IDs, one for one; "" for a batch listed
	// before submitters were kept, or joined without one (AppendBy).
	By []string `msgpack:"by,omitempty" json:"by,omitempty"`
	// HeadSince is when IDs[0] became the head.
	HeadSince time.Time `msgpack:"head_since" json:"head_since"`
	// Released are the ids removed last, at most MaxReleased, newest last:
	// a late repeat of an admission (a retried submission, a resumed edit)
	// must not list a finished batch again.
	Released []uint64 `msgpack:"released,omitempty" json:"released,omitempty"`
}

// MaxReleased bounds KeyQueue.Released.
const MaxReleased = 16

// Head returns the key's head, 0 when none waits.
func (q *KeyQueue) Head() uint64 {
	if len(q.IDs) == 0 {
		return 0
	}
	return q.IDs[0]
}

// CountBy counts the batches of submitter by in the key's order, the head
// included.
func (q *KeyQueue) CountBy(by string) int {
	n := 0
	for _, b := range q.By {
		if b == by {
			n++
		}
	}
	return n
}

// SubmitterOf returns the submitter of the batch at place i of IDs.
func (q *KeyQueue) SubmitterOf(i int) string {
	if i < len(q.By) {
		return q.By[i]
	}
	return ""
}

func (q *KeyQueue) version() uint8 { return q.V }
func (q *KeyQueue) setVersion()    { q.V = WireVersion }
