package authz

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// sendManyOverSmallBucket sends, as alice, the send_many that reqs
// builds from a no-op batch's functions and from functions whose record
// is larger than the batches bucket takes meanwhile (4 KiB).
func sendManyOverSmallBucket(t *testing.T, reqs func(noop, big api.Calls) []api.SendRequest) (*parts, *sentMany) {
	t.Helper()
	p := newParts(t)
	ik := p.intake(p.keyOrders())
	bucket, err := p.admin.Stream(p.ctx, "KV_"+streams.BucketBatches)
	if err != nil {
		t.Fatal(err)
	}
	cfg := bucket.CachedInfo().Config
	small := cfg
	small.MaxMsgSize = 4096
	if _, err := p.admin.UpdateStream(p.ctx, small); err != nil {
		t.Fatal(err)
	}
	big := api.Calls{{Type: "noop", Payload: pipeline.Payload(fmt.Sprintf("%q", strings.Repeat("x", 8192)))}}
	rs := reqs(api.Calls{{Type: "noop"}}, big)
	rep, err := ik.sendMany(p.ctx, "alice", rs)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.admin.UpdateStream(p.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(rs) {
		t.Fatalf("%d results for %d batches", len(rep.Results), len(rs))
	}
	return p, rep
}

// TestSendManyStopsAtAFailureInside: a batch the store refuses (a record
// larger than the batches bucket takes) is answered with its 500, and
// every batch after it 503, not submitted: nothing of theirs is recorded
// or queued. The batches before it, and one refused for what it asks (an
// unknown label), do not stop the request. The failing batch has a key,
// so it is submitted alone, after the ones before it and before any
// after it.
func TestSendManyStopsAtAFailureInside(t *testing.T) {
	p, rep := sendManyOverSmallBucket(t, func(noop, big api.Calls) []api.SendRequest {
		return []api.SendRequest{
			{Label: "jobs", Functions: noop},
			{Label: "nope", Functions: noop},
			{Label: "jobs", Functions: big, Key: "k"},
			{Label: "jobs", Functions: noop},
			{Label: "jobs", Functions: noop},
		}
	})
	r := rep.Results
	if r[0].Failed() || r[0].ID == 0 {
		t.Fatalf("first batch: %+v, want queued", r[0])
	}
	if r[1].Code != api.CodeNotFound || !strings.Contains(r[1].Error, `unknown label "nope"`) {
		t.Fatalf("unknown label: %+v, want its 404", r[1])
	}
	if r[2].Code != api.CodeInternal {
		t.Fatalf("record refused by the store: %+v, want 500", r[2])
	}
	for _, after := range r[3:] {
		if after.Code != api.CodeUnavailable || !strings.Contains(after.Error, "not submitted: batch 2 of this request failed inside authz") {
			t.Fatalf("batch after the failure: %+v, want 503 not submitted", after)
		}
	}
	if rep.firstInternal == nil || rep.firstInternalAt != 2 {
		t.Fatalf("first failure inside recorded as %v at %d, want batch 2", rep.firstInternal, rep.firstInternalAt)
	}
	// Only the first batch is queued, and only it holds a record.
	if got := queueIDs(p.ctx, t, p.queueEditor(), pipeline.Med); len(got) != 1 || got[0] != r[0].ID {
		t.Fatalf("queue holds %v, want only batch %d", got, r[0].ID)
	}
	for id := r[0].ID + 1; id < r[0].ID+4; id++ {
		if _, err := p.store.record(p.ctx, id); err == nil {
			t.Fatalf("batch %d, after batch %d, has a record", id, r[0].ID)
		}
	}
}

// TestSendManyRunAnswersEachBatch: plain batches listed together are
// submitted together, a chunk of sendRunChunk at a time, their records
// and then their tokens written before any is awaited; each is answered
// by its own outcome. One whose record the store refuses is answered 500
// and leaves no record; the others of its chunk, before and after it, are
// recorded and queued in the request's order; the batches after the chunk
// (the rest of the run, and a keyed batch after it) are not submitted
// (503), as after any failure inside, so no more than a chunk of a
// request is ever between its record and its token.
func TestSendManyRunAnswersEachBatch(t *testing.T) {
	const n = sendRunChunk + 4
	p, rep := sendManyOverSmallBucket(t, func(noop, big api.Calls) []api.SendRequest {
		reqs := make([]api.SendRequest, n)
		for i := range reqs {
			reqs[i] = api.SendRequest{Label: "jobs", Functions: noop}
		}
		reqs[1].Functions = big
		reqs[n-2].Key = "k"
		return reqs
	})
	r := rep.Results
	var want []uint64
	for i := range sendRunChunk {
		if i == 1 {
			continue
		}
		if r[i].Failed() || r[i].ID != r[0].ID+uint64(i) {
			t.Fatalf("batch %d: %+v, want queued as batch %d", i, r[i], r[0].ID+uint64(i))
		}
		want = append(want, r[i].ID)
	}
	if r[1].Code != api.CodeInternal || !strings.Contains(r[1].Error, fmt.Sprintf("record batch %d", r[0].ID+1)) {
		t.Fatalf("record refused by the store: %+v, want 500 naming batch %d", r[1], r[0].ID+1)
	}
	for i, after := range r[sendRunChunk:] {
		if after.Code != api.CodeUnavailable || !strings.HasPrefix(after.Error, api.NotSubmitted+"batch 1 of this request failed inside authz") {
			t.Fatalf("batch %d, after the chunk: %+v, want 503 not submitted", sendRunChunk+i, after)
		}
	}
	if got := queueIDs(p.ctx, t, p.queueEditor(), pipeline.Med); !slices.Equal(got, want) {
		t.Fatalf("queue holds %v, want %v", got, want)
	}
	if _, err := p.store.record(p.ctx, r[0].ID+1); err == nil {
		t.Fatalf("the refused batch %d has a record", r[0].ID+1)
	}
	if _, err := p.store.record(p.ctx, r[0].ID+sendRunChunk); err == nil {
		t.Fatalf("batch %d, after the chunk, has a record", r[0].ID+sendRunChunk)
	}
	for _, id := range want {
		rec, err := p.store.record(p.ctx, id)
		if err != nil {
			t.Fatalf("batch %d: %v", id, err)
		}
		if rec.Status != pipeline.InProcess || rec.Batch.Submitter != "alice" {
			t.Fatalf("batch %d recorded %s by %q", id, rec.Status, rec.Batch.Submitter)
		}
	}
}

// TestSendManyRateAllOrNone: a send_many counts one send a batch against
// the caller's send rate, all or none: more than the burst is refused as
// a bad request, more than the bucket holds now as 429, and neither takes
// anything from the bucket.
func TestSendManyRateAllOrNone(t *testing.T) {
	p := newParts(t)
	table, err := ParseTable([]byte(partsTable + "callers:\n  alice: {send_rate: 0.001, send_burst: 3}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p.table = table
	ik := p.intake(p.keyOrders())
	one := api.SendRequest{Label: "jobs", Functions: api.Calls{{Type: "noop"}}}
	many := func(n int) []api.SendRequest {
		reqs := make([]api.SendRequest, n)
		for i := range reqs {
			reqs[i] = one
		}
		return reqs
	}
	_, err = ik.sendMany(p.ctx, "alice", many(4))
	if ae := asError(err); err == nil || ae.Code != api.CodeBadRequest || !strings.Contains(ae.Message, "more than alice's send_burst (3) allows at once") {
		t.Fatalf("4 batches over a burst of 3: %v, want 400 naming the burst", err)
	}
	rep, err := ik.sendMany(p.ctx, "alice", many(2))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rep.Results {
		if r.Failed() {
			t.Fatalf("batch %d of 2: %+v", i, r)
		}
	}
	_, err = ik.sendMany(p.ctx, "alice", many(2))
	if ae := asError(err); err == nil || ae.Code != api.CodeTooManyRequests || !strings.Contains(ae.Message, "nothing was submitted") {
		t.Fatalf("2 batches with 1 left in the bucket: %v, want 429", err)
	}
	// The refusal took nothing: the one send left goes through.
	if _, err := ik.send(p.ctx, "alice", &one); err != nil {
		t.Fatalf("the send left in the bucket: %v", err)
	}
	if got := queueIDs(p.ctx, t, p.queueEditor(), pipeline.Med); len(got) != 3 {
		t.Fatalf("queue holds %v, want the 3 batches sent", got)
	}
	for _, n := range []int{0, api.MaxSendMany + 1} {
		if _, err := ik.sendMany(p.ctx, "alice", many(n)); asError(err).Code != api.CodeBadRequest {
			t.Fatalf("send_many of %d batches: %v, want 400", n, err)
		}
	}
}
