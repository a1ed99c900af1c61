package authz

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// staled moves b's progress one step on, as a processor's rotation does,
// so that its token in the queue is no longer live.
func staled(t *testing.T, p *parts, b *pipeline.Batch) {
	t.Helper()
	st := p.loadProgress(t, b)
	st.Rotation++
	if err := p.progress.Save(p.ctx, b.Domain, st); err != nil {
		t.Fatal(err)
	}
}

// inflightIDs are the ids an in-flight listing shows, in order.
func inflightIDs(rep *api.InFlightReply) []uint64 {
	var ids []uint64
	for _, it := range rep.Items {
		ids = append(ids, it.ID)
	}
	return ids
}

// TestInspectorDomains: every domain the table names, sorted, with its
// queues' depths per priority, its dead letters, its pause state and its
// throttle window as stored; a pause state that does not decode reads as
// not paused, a throttle window that does not decode as none, and a domain
// nothing was written for as all zero.
func TestInspectorDomains(t *testing.T) {
	p := newParts(t)
	ins := p.inspector(p.keyOrders())
	queued(t, p, 2)
	hi := p.enqueue(t, p.batch(func(b *pipeline.Batch) { b.Priority = pipeline.High }))
	failed(t, p, hi)
	gone := p.batch(func(b *pipeline.Batch) { b.ID = 1 << 50 })
	failed(t, p, &gone)
	p.enqueue(t, p.batch(func(b *pipeline.Batch) {
		b.Domain, b.Label, b.Submitter, b.Priority = "ship", "parcels", "bob", pipeline.High
	}))
	at := p.clock.Now().Truncate(time.Second)
	paused, err := json.Marshal(records.DomainState{Paused: true, By: DefaultOwner, At: at})
	if err != nil {
		t.Fatal(err)
	}
	state, err := p.admin.KeyValue(p.ctx, streams.BucketDomainStates)
	if err != nil {
		t.Fatal(err)
	}
	for d, v := range map[string][]byte{"pay": paused, "ship": []byte("garbage")} {
		if _, err := state.Put(p.ctx, d, v); err != nil {
			t.Fatal(err)
		}
	}
	granted, second, err := streams.NewThrottleStore(p.h.locks, time.Now).Take(p.ctx, "pay", 10, 3)
	if err != nil || granted != 3 {
		t.Fatalf("throttle: %d granted, %v", granted, err)
	}
	// A throttle window that does not decode reads as none, as a bad pause
	// state does: the domains view still answers.
	if _, err := p.h.locks.Put(p.ctx, streams.ThrottleKey("ship"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}

	out, err := ins.domains(p.ctx, DefaultOwner, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.DomainInfo{
		{Domain: "pay", Paused: true, PausedBy: DefaultOwner, At: at, Depth: map[pipeline.Priority]uint64{pipeline.High: 1, pipeline.Med: 2},
			DeadLetters: 2, Throttle: &api.ThrottleWindow{Limit: 10, Second: second, Used: 3}},
		{Domain: "ship", Depth: map[pipeline.Priority]uint64{pipeline.High: 1, pipeline.Med: 0}},
	}
	got, _ := json.Marshal(out.(*api.DomainsReply).Domains)
	if w, _ := json.Marshal(want); string(got) != string(w) {
		t.Fatalf("domains\n%s\nwant\n%s", got, w)
	}
}

// TestInspectorInFlight: the batches of a domain with a live token or a
// schedule, of both priorities, oldest first, each with its progress (the
// processor that moved it last, since when); a batch whose token is stale
// or whose progress is done, and another domain's, are left out. A
// listing with a limit says there are more; with the total it counts them
// all. A bad domain or limit is refused with a 400.
func TestInspectorInFlight(t *testing.T) {
	p := newParts(t)
	ko := p.keyOrders()
	ins := p.inspector(ko)
	first := p.enqueue(t, p.batch(nil))
	high := p.enqueue(t, p.batch(func(b *pipeline.Batch) { b.Priority = pipeline.High }))
	moved := p.enqueue(t, p.batch(nil))
	stale := p.enqueue(t, p.batch(nil))
	later := scheduledFor(t, p, ko.scheduled, p.clock.Now().Add(time.Hour))
	done := p.enqueue(t, p.batch(nil))
	bobs := p.enqueue(t, p.batch(func(b *pipeline.Batch) { b.Domain, b.Label, b.Submitter = "ship", "parcels", "bob" }))
	staled(t, p, stale)
	st := p.loadProgress(t, moved)
	st.Next, st.By = 1, "p1"
	if err := p.progress.Save(p.ctx, "pay", st); err != nil {
		t.Fatal(err)
	}
	if err := ko.removal.markRemoved(p.ctx, done, p.loadProgress(t, done), ""); err != nil {
		t.Fatal(err)
	}
	saved := p.loadProgress(t, moved)

	out, err := ins.inflight(p.ctx, DefaultOwner, &api.InFlightRequest{Domain: "pay"})
	if err != nil {
		t.Fatal(err)
	}
	rep := out.(*api.InFlightReply)
	if ids, want := inflightIDs(rep), idsOf(first, high, moved, later); !slices.Equal(ids, want) || rep.More || rep.Total != nil {
		t.Fatalf("in flight %v (more %v), want %v", ids, rep.More, want)
	}
	for _, it := range rep.Items {
		switch it.ID {
		case high.ID:
			if it.Priority != pipeline.High || it.Position != 0 {
				t.Fatalf("the high batch: %+v", it)
			}
		case moved.ID:
			if it.Holder != "p1" || it.Next != 1 || !it.Since.Equal(saved.UpdatedAt) || it.Position != 1 {
				t.Fatalf("the batch a processor moved: %+v, want held by p1 since %v, second in its queue", it, saved.UpdatedAt)
			}
		case later.ID:
			if !it.RunAt.Equal(later.RunAt) {
				t.Fatalf("the scheduled batch: %+v, want run at %v", it, later.RunAt)
			}
		}
		if it.Label != "jobs" || it.Submitter != "alice" || it.Functions != 1 || (it.ID != moved.ID && !it.Since.Equal(it.CreatedAt)) {
			t.Fatalf("item %+v, want alice's one noop under jobs, since it was accepted", it)
		}
	}

	for _, tc := range []struct {
		name     string
		req      api.InFlightRequest
		want     []uint64
		more     bool
		total    int // -1: none
		wantCode int
	}{
		{name: "a limit", req: api.InFlightRequest{Domain: "pay", Limit: 2}, want: idsOf(first, high), more: true, total: -1},
		{name: "a limit and the total", req: api.InFlightRequest{Domain: "pay", Limit: 2, Total: true}, want: idsOf(first, high), more: true, total: 4},
		{name: "another domain", req: api.InFlightRequest{Domain: "ship", Total: true}, want: idsOf(bobs), total: 1},
		{name: "a bad domain", req: api.InFlightRequest{Domain: "pay.>"}, wantCode: api.CodeBadRequest},
		{name: "a negative limit", req: api.InFlightRequest{Domain: "pay", Limit: -1}, wantCode: api.CodeBadRequest},
		{name: "a limit past the most", req: api.InFlightRequest{Domain: "pay", Limit: api.MaxInFlight + 1}, wantCode: api.CodeBadRequest},
	} {
		out, err := ins.inflight(p.ctx, DefaultOwner, &tc.req)
		if codeOf(err) != tc.wantCode {
			t.Fatalf("%s: %v, want code %d", tc.name, err, tc.wantCode)
		}
		if err != nil {
			continue
		}
		rep := out.(*api.InFlightReply)
		ids := inflightIDs(rep)
		total := -1
		if rep.Total != nil {
			total = *rep.Total
		}
		if !slices.Equal(ids, tc.want) || rep.More != tc.more || total != tc.total {
			t.Fatalf("%s: %v, more %v, total %d; want %v, more %v, total %d", tc.name, ids, rep.More, total, tc.want, tc.more, tc.total)
		}
	}
}

// TestInspectorScanQueue: a scan visits a domain's live tokens in queue
// order, positions counting live tokens only; what does not decode and
// stale tokens are passed over. It stops after max tokens read and says
// it was cut short, and stops when visit says so, reading nothing more,
// which is no cut.
func TestInspectorScanQueue(t *testing.T) {
	p := newParts(t)
	ins := p.inspector(p.keyOrders())
	bs := queued(t, p, 2)
	if _, err := p.admin.Publish(p.ctx, streams.TokenSubject(pipeline.Med, "pay"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	bs = append(bs, queued(t, p, 2)...)
	staled(t, p, bs[1])
	med := &countingStream{Stream: ins.queues[pipeline.Med]}
	ins.queues[pipeline.Med] = med

	type visited struct {
		id       uint64
		position int
	}
	for _, tc := range []struct {
		name      string
		max       int
		stopAfter int // visits before visit says stop; 0: never
		want      []visited
		truncated bool
		reads     int64
	}{
		{name: "all", want: []visited{{bs[0].ID, 0}, {bs[2].ID, 1}, {bs[3].ID, 2}}, reads: 6},
		{name: "at most three read", max: 3, want: []visited{{bs[0].ID, 0}}, truncated: true, reads: 3},
		{name: "stopped by visit", stopAfter: 2, want: []visited{{bs[0].ID, 0}, {bs[2].ID, 1}}, reads: 4},
	} {
		med.reads.Store(0)
		var got []visited
		cut, err := ins.scanQueueWhile(p.ctx, "pay", pipeline.Med, tc.max, func(it api.QueueItem, tok records.Token, _ *streams.ProgressEntry) bool {
			if it.ID != tok.BatchID || it.Subject != streams.TokenSubject(pipeline.Med, "pay") {
				t.Errorf("%s: item %+v of token %+v", tc.name, it, tok)
			}
			got = append(got, visited{it.ID, it.Position})
			return tc.stopAfter == 0 || len(got) < tc.stopAfter
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) || cut != tc.truncated || med.reads.Load() != tc.reads {
			t.Fatalf("%s: visited %v, cut %v, %d reads; want %v, cut %v, %d reads", tc.name, got, cut, med.reads.Load(), tc.want, tc.truncated, tc.reads)
		}
	}
}
