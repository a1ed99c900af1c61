package worker_test

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// results opens the results bucket and its stream as admin.
func results(t *testing.T, env *testnats.Env) (jetstream.KeyValue, jetstream.Stream) {
	t.Helper()
	ctx := testnats.Context(t, 10*time.Second)
	js := env.JS(t, "admin")
	kv, err := js.KeyValue(ctx, streams.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "KV_"+streams.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	return kv, st
}

// lastSeq is the results stream's last sequence: how many messages were
// ever stored in it.
func lastSeq(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(testnats.Context(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// readGroup reads the unit group of batch id, by key.
func readGroup(t *testing.T, kv jetstream.KeyValue, id uint64) map[string]records.UnitEntry {
	t.Helper()
	e, err := kv.Get(testnats.Context(t, 5*time.Second), streams.UnitGroupKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	g, err := records.Decode[records.UnitGroup](e.Value())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]records.UnitEntry{}
	for _, u := range g.Units {
		out[u.Key] = u
	}
	return out
}

// putGroup writes the unit group of batch id as given, as admin.
func putGroup(t *testing.T, kv jetstream.KeyValue, id uint64, entries ...records.UnitEntry) {
	t.Helper()
	b, err := records.Encode(&records.UnitGroup{Units: entries})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(testnats.Context(t, 5*time.Second), streams.UnitGroupKey(id), b); err != nil {
		t.Fatal(err)
	}
}

func unitKey(id uint64) string { return streams.ResultKey(id, -1, 0) }

// countingMux registers "count", which answers its batch id and counts its
// runs per batch, and "fail", which fails while failing is set.
func countingMux(runs *sync.Map, failing *atomic.Bool) *pipeline.ServeMux {
	mux := pipeline.NewServeMux()
	count := func(id uint64) {
		n, _ := runs.LoadOrStore(id, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
	}
	mux.RegisterFunc("count", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		count(c.BatchID)
		return pipeline.Result{Data: pipeline.MustPayload(c.BatchID)}, nil
	})
	mux.RegisterFunc("fail", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		count(c.BatchID)
		if failing != nil && failing.Load() {
			return pipeline.Result{}, errors.New("not yet")
		}
		return pipeline.Result{Data: pipeline.MustPayload(c.BatchID)}, nil
	})
	return mux
}

func runsOf(runs *sync.Map, id uint64) int32 {
	n, ok := runs.Load(id)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

// TestUnitGroupTakesTwoWrites: a request of 64 units of one group costs
// the results stream one claim write and one record write (the units
// whose runs end within the linger share it), not the 128 of a claim and
// a record per unit; the same request again is answered from the records
// without a handler and without a write.
func TestUnitGroupTakesTwoWrites(t *testing.T) {
	// However slowly this machine runs 64 handlers, they end within it.
	worker.SetRecordLinger(t, time.Minute)
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	serve(t, env, countingMux(&runs, nil), worker.Options{})
	nc := env.Conn(t, "processor")
	kv, st := results(t, env)

	var units []records.WorkRequest
	for id := uint64(64); id < 128; id++ {
		units = append(units, unitReq(id, "count"))
	}
	before := lastSeq(t, st)
	for i, r := range callUnits(t, nc, units, 5*time.Second) {
		if r.Error != nil || r.Recorded || !r.Fresh || len(r.Outputs) != 1 {
			t.Fatalf("unit %d: %+v", units[i].BatchID, r)
		}
	}
	if n := lastSeq(t, st) - before; n != 2 {
		t.Fatalf("64 units stored %d messages in the results stream, want a claim and a record write", n)
	}
	g := readGroup(t, kv, 64)
	if len(g) != 64 {
		t.Fatalf("the group holds %d entries, want 64", len(g))
	}
	for _, u := range units {
		if e := g[unitKey(u.BatchID)]; !e.Recorded() || len(e.Outputs) != 1 {
			t.Fatalf("entry of %d: %+v, want its record", u.BatchID, e)
		}
	}

	before = lastSeq(t, st)
	for i, r := range callUnits(t, nc, units, 5*time.Second) {
		if r.Error != nil || !r.Recorded || r.Fresh || string(r.Outputs[0].Data) != string(pipeline.MustPayload(units[i].BatchID)) {
			t.Fatalf("unit %d again: %+v", units[i].BatchID, r)
		}
	}
	if n := lastSeq(t, st) - before; n != 0 {
		t.Fatalf("the repeated request stored %d messages, want none", n)
	}
	// The single-unit endpoint reads the same records.
	r := unitReq(100, "count")
	if rep := call(t, nc, streams.WorkUnitSubject, &r, time.Second); rep.Error != nil || !rep.Recorded {
		t.Fatalf("unit 100 alone: %+v", rep)
	}
	for id := uint64(64); id < 128; id++ {
		if n := runsOf(&runs, id); n != 1 {
			t.Fatalf("unit %d ran %d times, want 1", id, n)
		}
	}
}

// TestUnitGroupConcurrentRequestsRunEachOnce: requests that share units
// and groups, sent at once to two workers, run each unit exactly once;
// every unit is answered with its outputs once its busy answers are
// retried.
func TestUnitGroupConcurrentRequestsRunEachOnce(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	serve(t, env, countingMux(&runs, nil), worker.Options{Name: "a"})
	serve(t, env, countingMux(&runs, nil), worker.Options{Name: "b"})
	nc := env.Conn(t, "processor")

	// Four requests over ids 40..119 (groups 0 and 1), each overlapping
	// the next by half.
	var reqs [][]records.WorkRequest
	for start := uint64(40); start < 120; start += 20 {
		var units []records.WorkRequest
		for id := start; id < min(start+40, 120); id++ {
			units = append(units, unitReq(id, "count"))
		}
		reqs = append(reqs, units)
	}
	testnats.Eventually(t, 20*time.Second, "every unit answered", func() bool {
		var wg sync.WaitGroup
		var pending atomic.Int32
		for _, units := range reqs {
			wg.Go(func() {
				for i, r := range callUnits(t, nc, units, 3*time.Second) {
					switch {
					case r.Error != nil && r.Error.Busy:
						pending.Add(1)
					case r.Error != nil || string(r.Outputs[0].Data) != string(pipeline.MustPayload(units[i].BatchID)):
						t.Errorf("unit %d: %+v", units[i].BatchID, r)
					}
				}
			})
		}
		wg.Wait()
		return pending.Load() == 0
	})
	for id := uint64(40); id < 120; id++ {
		if n := runsOf(&runs, id); n != 1 {
			t.Fatalf("unit %d ran %d times, want 1", id, n)
		}
	}
}

// TestUnitGroupExpiredClaimTakenOver: a live claim another worker holds in
// the group makes the unit busy without running it; once it has expired
// (its worker died) the unit is taken over and run, not as fresh.
func TestUnitGroupExpiredClaimTakenOver(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	serve(t, env, countingMux(&runs, nil), worker.Options{})
	nc := env.Conn(t, "processor")
	kv, _ := results(t, env)
	now := time.Now()
	putGroup(t, kv, 5,
		records.UnitEntry{Key: unitKey(5), Running: true, Claim: 11, Until: now.Add(time.Minute), Worker: "alive"},
		records.UnitEntry{Key: unitKey(6), Running: true, Claim: 12, Until: now.Add(-time.Second), Worker: "dead"},
	)
	reps := callUnits(t, nc, []records.WorkRequest{unitReq(5, "count"), unitReq(6, "count")}, 3*time.Second)
	if r := reps[0]; r.Error == nil || !r.Error.Busy {
		t.Fatalf("unit 5 under a live claim: %+v, want busy", r)
	}
	if r := reps[1]; r.Error != nil || r.Recorded || r.Fresh || len(r.Outputs) != 1 {
		t.Fatalf("unit 6 under an expired claim: %+v, want run, not fresh", r)
	}
	if runsOf(&runs, 5) != 0 || runsOf(&runs, 6) != 1 {
		t.Fatalf("runs: unit 5 %d, unit 6 %d; want 0 and 1", runsOf(&runs, 5), runsOf(&runs, 6))
	}
	g := readGroup(t, kv, 5)
	if e := g[unitKey(5)]; !e.Running || e.Worker != "alive" {
		t.Fatalf("unit 5's claim: %+v, want the live claim left alone", e)
	}
	if e := g[unitKey(6)]; !e.Recorded() {
		t.Fatalf("unit 6: %+v, want its record", e)
	}
	r := unitReq(5, "count")
	if rep := call(t, nc, streams.WorkUnitSubject, &r, time.Second); rep.Error == nil || !rep.Error.Busy {
		t.Fatalf("unit 5 alone under a live claim: %+v, want busy", rep)
	}
}

// TestUnitGroupFailedUnitRunsAgain: a unit that fails leaves no record,
// its group-mates' records stay, and a retry runs it again while they are
// answered from theirs.
func TestUnitGroupFailedUnitRunsAgain(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	var failing atomic.Bool
	failing.Store(true)
	serve(t, env, countingMux(&runs, &failing), worker.Options{})
	nc := env.Conn(t, "processor")
	kv, _ := results(t, env)
	units := []records.WorkRequest{unitReq(1, "count"), unitReq(2, "fail"), unitReq(3, "count")}
	first := callUnits(t, nc, units, 3*time.Second)
	if first[0].Error != nil || first[2].Error != nil || first[1].Error == nil || first[1].Error.Busy {
		t.Fatalf("first: %+v", first)
	}
	g := readGroup(t, kv, 1)
	if e := g[unitKey(2)]; e.Recorded() || e.Running {
		t.Fatalf("the failed unit's entry: %+v, want neither record nor claim", e)
	}
	for _, id := range []uint64{1, 3} {
		if e := g[unitKey(id)]; !e.Recorded() {
			t.Fatalf("unit %d: %+v, want its record", id, e)
		}
	}
	failing.Store(false)
	again := callUnits(t, nc, units, 3*time.Second)
	if !again[0].Recorded || !again[2].Recorded || again[1].Error != nil || again[1].Recorded || again[1].Fresh {
		t.Fatalf("again: %+v", again)
	}
	if runsOf(&runs, 1) != 1 || runsOf(&runs, 2) != 2 || runsOf(&runs, 3) != 1 {
		t.Fatalf("runs %d %d %d, want 1 2 1", runsOf(&runs, 1), runsOf(&runs, 2), runsOf(&runs, 3))
	}
	if r := callUnits(t, nc, units[1:2], 3*time.Second)[0]; !r.Recorded || runsOf(&runs, 2) != 2 {
		t.Fatalf("unit 2 after its success: %+v", r)
	}
}

// TestUnitGroupDropsExpiredEntries: a write of a group leaves out the
// records and released runs that expired, and turns an expired claim into
// a released run; the server removes the group once its last entry's
// lifetime (the message's time to live) is over.
func TestUnitGroupDropsExpiredEntries(t *testing.T) {
	env := testnats.Start(t, []string{"pay"}, testnats.WithSettings(func(s *streams.Settings) {
		s.FinishedMaxAge, s.AckWait, s.DuplicateWindow = time.Second, time.Second, time.Second
	}))
	var runs sync.Map
	serve(t, env, countingMux(&runs, nil), worker.Options{})
	nc := env.Conn(t, "processor")
	kv, st := results(t, env)
	past := time.Now().Add(-time.Second)
	putGroup(t, kv, 1,
		records.UnitEntry{Key: unitKey(1), Claim: 1, Until: past, Outputs: []pipeline.Output{{Index: 0, Type: "count"}}},
		records.UnitEntry{Key: unitKey(2), Released: true, Claim: 2, Until: past},
		records.UnitEntry{Key: unitKey(3), Running: true, Claim: 3, Until: past, Worker: "dead"},
	)
	if r := callUnits(t, nc, []records.WorkRequest{unitReq(4, "count")}, 3*time.Second)[0]; r.Error != nil || !r.Fresh {
		t.Fatalf("unit 4: %+v", r)
	}
	g := readGroup(t, kv, 1)
	if e := g[unitKey(4)]; len(g) != 2 || !e.Recorded() || !g[unitKey(3)].Released {
		t.Fatalf("group after a write: %+v, want unit 4's record and unit 3's claim released", g)
	}
	// An expired record runs again.
	if r := callUnits(t, nc, []records.WorkRequest{unitReq(1, "count")}, 3*time.Second)[0]; r.Error != nil || r.Recorded {
		t.Fatalf("unit 1 after its record expired: %+v", r)
	}
	m, err := st.GetLastMsgForSubject(testnats.Context(t, 5*time.Second), "$KV."+streams.BucketResults+"."+streams.UnitGroupKey(1))
	if err != nil {
		t.Fatal(err)
	}
	if ttl := m.Header.Get(jetstream.MsgTTLHeader); ttl == "" {
		t.Fatal("the group's last write carries no time to live")
	}
	testnats.Eventually(t, 30*time.Second, "the group removed once its entries expired", func() bool {
		return readGroup(t, kv, 1) == nil
	})
}

// TestUnitGroupLargeOutputOwnKey: a record too large to share its group's
// value goes under the unit's own key, the group holding a marker, and a
// repeated call, on either unit endpoint, is answered from it.
func TestUnitGroupLargeOutputOwnKey(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs atomic.Int32
	big := bytes.Repeat([]byte("x"), 2<<10) // over inlineRecordMax, far under max_payload / 64
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("big", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		runs.Add(1)
		return pipeline.Result{Data: pipeline.MustPayload(string(big))}, nil
	})
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	kv, _ := results(t, env)
	first := callUnits(t, nc, []records.WorkRequest{unitReq(7, "big")}, 3*time.Second)[0]
	if first.Error != nil || !first.Fresh {
		t.Fatalf("first: %+v", first.Error)
	}
	if e := readGroup(t, kv, 7)[unitKey(7)]; !e.Own || len(e.Outputs) != 0 {
		t.Fatalf("group entry: own %v, %d outputs; want a marker", e.Own, len(e.Outputs))
	}
	if _, err := kv.Get(testnats.Context(t, 5*time.Second), unitKey(7)); err != nil {
		t.Fatalf("the unit's own key: %v", err)
	}
	again := callUnits(t, nc, []records.WorkRequest{unitReq(7, "big")}, 3*time.Second)[0]
	r := unitReq(7, "big")
	alone := call(t, nc, streams.WorkUnitSubject, &r, time.Second)
	for _, rep := range []*records.WorkReply{&again, alone} {
		if rep.Error != nil || !rep.Recorded || len(rep.Outputs) != 1 || !bytes.Equal(rep.Outputs[0].Data, first.Outputs[0].Data) {
			t.Fatalf("repeated: recorded %v error %+v", rep.Recorded, rep.Error)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("handler ran %d times, want 1", runs.Load())
	}
}

// TestUnitGroupUnreadableIsBusy: a group value that does not decode makes
// its units busy (not attempted) on every endpoint; no handler runs and
// the value is left as it is.
func TestUnitGroupUnreadableIsBusy(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	serve(t, env, countingMux(&runs, nil), worker.Options{})
	nc := env.Conn(t, "processor")
	kv, _ := results(t, env)
	ctx := testnats.Context(t, 5*time.Second)
	garbage := []byte("not a group")
	if _, err := kv.Put(ctx, streams.UnitGroupKey(9), garbage); err != nil {
		t.Fatal(err)
	}
	reps := callUnits(t, nc, []records.WorkRequest{unitReq(9, "count"), unitReq(200, "count")}, 3*time.Second)
	if r := reps[0]; r.Error == nil || !r.Error.Busy {
		t.Fatalf("unit 9: %+v, want busy", r)
	}
	if r := reps[1]; r.Error != nil {
		t.Fatalf("unit 200, in another group: %+v", r)
	}
	r := unitReq(9, "count")
	if rep := call(t, nc, streams.WorkUnitSubject, &r, time.Second); rep.Error == nil || !rep.Error.Busy {
		t.Fatalf("unit 9 alone: %+v, want busy", rep)
	}
	if n := runsOf(&runs, 9); n != 0 {
		t.Fatalf("unit 9 ran %d times, want 0", n)
	}
	e, err := kv.Get(ctx, streams.UnitGroupKey(9))
	if err != nil || !bytes.Equal(e.Value(), garbage) {
		t.Fatalf("the group's value: %q, %v; want it left alone", e.Value(), err)
	}
}

// TestUnitGroupTakeoverFindsOwnRecord: a worker that wrote a large record
// under its unit's own key and died before its group's marker leaves an
// expired claim; the call that takes the claim over finds the record and
// answers from it instead of running the handler again.
func TestUnitGroupTakeoverFindsOwnRecord(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	serve(t, env, countingMux(&runs, nil), worker.Options{})
	nc := env.Conn(t, "processor")
	kv, _ := results(t, env)
	ctx := testnats.Context(t, 5*time.Second)
	done, err := records.Encode(&records.Completion{Worker: "dead", Outputs: []pipeline.Output{{Index: 0, Type: "count", Data: pipeline.MustPayload("before")}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, unitKey(3), done); err != nil {
		t.Fatal(err)
	}
	putGroup(t, kv, 3, records.UnitEntry{Key: unitKey(3), Running: true, Claim: 5, Until: time.Now().Add(-time.Second), Worker: "dead"})
	r := callUnits(t, nc, []records.WorkRequest{unitReq(3, "count")}, 3*time.Second)[0]
	if r.Error != nil || !r.Recorded || string(r.Outputs[0].Data) != string(pipeline.MustPayload("before")) {
		t.Fatalf("unit 3: %+v, want the dead worker's record", r)
	}
	if n := runsOf(&runs, 3); n != 0 {
		t.Fatalf("unit 3 ran %d times, want 0", n)
	}
	if e := readGroup(t, kv, 3)[unitKey(3)]; !e.Own || !e.Recorded() {
		t.Fatalf("group entry: %+v, want the marker of the record under its own key", e)
	}
}

// TestUnitGroupDuplicateUnitRunsOnce: a unit sent twice in one request
// runs once; the second copy is busy (not attempted).
func TestUnitGroupDuplicateUnitRunsOnce(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	var runs sync.Map
	serve(t, env, countingMux(&runs, nil), worker.Options{})
	nc := env.Conn(t, "processor")
	reps := callUnits(t, nc, []records.WorkRequest{unitReq(50, "count"), unitReq(50, "count")}, 3*time.Second)
	if reps[0].Error != nil || reps[1].Error == nil || !reps[1].Error.Busy {
		t.Fatalf("replies %+v, want the first run and the second busy", reps)
	}
	if n := runsOf(&runs, 50); n != 1 {
		t.Fatalf("unit 50 ran %d times, want 1", n)
	}
}

// TestUnitGroupSlowUnitDoesNotHoldBackRecords: in a request whose units
// share a group, a unit's record is written when its run ends, not when
// the request's slowest unit ends: while one unit's handler still runs,
// its group-mate's record is already in the group. A worker that died
// then would leave one effect without a record, not two.
func TestUnitGroupSlowUnitDoesNotHoldBackRecords(t *testing.T) {
	env := testnats.Start(t, []string{"pay"})
	release := make(chan struct{})
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("fast", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload(c.BatchID)}, nil
	})
	mux.RegisterFunc("slow", func(ctx context.Context, c *pipeline.Call) (pipeline.Result, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return pipeline.Result{}, ctx.Err()
		}
		return pipeline.Result{Data: pipeline.MustPayload(c.BatchID)}, nil
	})
	serve(t, env, mux, worker.Options{})
	nc := env.Conn(t, "processor")
	kv, _ := results(t, env)
	units := []records.WorkRequest{unitReq(192, "slow"), unitReq(193, "fast")}
	answered := make(chan []records.WorkReply, 1)
	go func() { answered <- callUnits(t, nc, units, 10*time.Second) }()
	testnats.Eventually(t, 5*time.Second, "the fast unit's record while the slow unit runs", func() bool {
		g, err := kv.Get(testnats.Context(t, 2*time.Second), streams.UnitGroupKey(193))
		if err != nil {
			return false
		}
		ug, err := records.Decode[records.UnitGroup](g.Value())
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ug.Units {
			if u.Key == unitKey(193) && u.Recorded() {
				return true
			}
		}
		return false
	})
	close(release)
	for i, r := range <-answered {
		if r.Error != nil || !r.Fresh {
			t.Fatalf("unit %d: %+v", units[i].BatchID, r)
		}
	}
	if g := readGroup(t, kv, 192); !recorded(g[unitKey(192)]) || !recorded(g[unitKey(193)]) {
		t.Fatalf("the group after both: %+v", g)
	}
}

func recorded(e records.UnitEntry) bool { return e.Recorded() }
