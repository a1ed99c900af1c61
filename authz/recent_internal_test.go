package authz

import (
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/pipeline"
)

// TestRecentRecordsBoundedByBytes: the records a replica remembers are
// kept encoded, given back decoded once, and held within maxRecentBytes
// however many are put: the oldest are forgotten, never the bound passed.
func TestRecentRecordsBoundedByBytes(t *testing.T) {
	rec := submit.NewRecord(&pipeline.Batch{ID: 7, Domain: "pay", Label: "jobs", Submitter: "alice",
		Functions: []pipeline.Function{{Type: "noop"}}}, "")
	data, err := records.Encode(rec)
	if err != nil {
		t.Fatal(err)
	}
	var r recentRecords
	r.put(7, &submit.Created{Data: data, Rev: 42})
	got, rev, ok := r.take(7)
	if !ok || rev != 42 || got.Batch.ID != 7 || got.Batch.Submitter != "alice" || len(got.Batch.Functions) != 1 {
		t.Fatalf("take: %+v at %d (%v), want batch 7 of alice at revision 42", got.Batch, rev, ok)
	}
	if _, _, ok := r.take(7); ok || r.bytes != 0 {
		t.Fatalf("taken twice (%v), or %d bytes left", ok, r.bytes)
	}
	// Far more than the bound: it holds what fits and no more.
	size := len(data) + recentOverhead
	fits := maxRecentBytes / size
	for id := range uint64(fits + fits/2) {
		r.put(id, &submit.Created{Data: data, Rev: id})
		if r.bytes > maxRecentBytes {
			t.Fatalf("after %d puts: %d bytes remembered, over the bound %d", id+1, r.bytes, maxRecentBytes)
		}
	}
	if len(r.m) != fits || r.bytes != fits*size {
		t.Fatalf("%d records in %d bytes remembered, want %d in %d", len(r.m), r.bytes, fits, fits*size)
	}
	// Putting a batch again replaces its entry.
	for id := range r.m {
		r.put(id, &submit.Created{Data: data, Rev: 1})
		break
	}
	if len(r.m) != fits || r.bytes != fits*size {
		t.Fatalf("after a put again: %d records in %d bytes, want %d in %d", len(r.m), r.bytes, fits, fits*size)
	}
}
