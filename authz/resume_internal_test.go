package authz

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

const resumeTable = `labels:
  jobs: {domain: pay, users: [alice], mode: atomic, priority: high, functions: {noop: {}}}
  limited: {domain: pay, users: [alice], mode: atomic, priority: high, max_concurrent: 1, functions: {noop: {}}}`

// builtOnly records alice's submission of one noop under label, with key
// (none if empty), up to its record and no further, without an
// idempotency key: as if authz died before queueing it, its caller left
// with no answer and nothing to retry it with.
func builtOnly(ctx context.Context, t *testing.T, s *Service, label, key string) *pipeline.Batch {
	t.Helper()
	l := s.Table().Labels[label]
	b, err := s.intake.build(ctx, &submission{label: label, l: l, user: "alice", calls: []api.CallSpec{{Type: "noop"}}, key: key, prio: l.Priority})
	if err != nil {
		t.Fatal(err)
	}
	return b.batch
}

// TestResumeQueuesWhatADeadReplicaLeft: the batches recorded shortly before
// a replica's start that were queued nowhere (their authz died between
// their record and their token, or their key's order) are queued once, a
// key's as its head; a batch queued in full keeps its one token; a batch
// cancelled, and one recorded before the window, are left alone. Checked
// again, nothing changes.
func TestResumeQueuesWhatADeadReplicaLeft(t *testing.T) {
	s, _, ctx := internalService(t, resumeTable)
	plain := builtOnly(ctx, t, s, "jobs", "")
	keyed := builtOnly(ctx, t, s, "jobs", "order-1")
	queued, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: []api.CallSpec{{Type: "noop"}}})
	if err != nil {
		t.Fatal(err)
	}
	cancelled := builtOnly(ctx, t, s, "jobs", "")
	if _, err := s.removal.cancel(ctx, "alice", &api.IDRequest{ID: cancelled.ID}); err != nil {
		t.Fatal(err)
	}
	s.intake.now = func() time.Time { return time.Now().Add(-time.Hour) }
	old := builtOnly(ctx, t, s, "jobs", "")
	s.intake.now = time.Now
	if got := queuedIDs(ctx, t, s, pipeline.High); !slices.Equal(got, []uint64{queued.ID}) {
		t.Fatalf("queued %v before the check, want only [%d]", got, queued.ID)
	}
	for round := range 2 {
		r, err := s.resumeRecent(ctx, s.intake.now())
		if err != nil {
			t.Fatal(err)
		}
		// First plain and keyed; queued (its token in the queue) and then
		// those two are left alone, and so is cancelled while its callback
		// waits to be applied (terminal once it is).
		wantChecked := 2
		if round > 0 {
			wantChecked = 0
		}
		if r.checked != wantChecked || r.queued < 3-wantChecked || r.queued > 4-wantChecked || r.old != 1 || r.failed != 0 {
			t.Fatalf("round %d: %+v, want %d checked, the rest of plain, keyed, queued (and perhaps cancelled) left queued, 1 too old, none failed", round, r, wantChecked)
		}
		got := queuedIDs(ctx, t, s, pipeline.High)
		slices.Sort(got)
		want := []uint64{plain.ID, keyed.ID, queued.ID}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: queued %v, want %v (not the cancelled %d, not the old %d)", round, got, want, cancelled.ID, old.ID)
		}
		for _, b := range []*pipeline.Batch{plain, keyed, {ID: queued.ID, Domain: "pay", Priority: pipeline.High}} {
			if n := tokensOf(ctx, t, s, b); n != 1 {
				t.Fatalf("round %d: batch %d has %d tokens, want 1", round, b.ID, n)
			}
		}
		for _, b := range []*pipeline.Batch{cancelled, old} {
			if n := tokensOf(ctx, t, s, b); n != 0 {
				t.Fatalf("round %d: batch %d has %d tokens, want none", round, b.ID, n)
			}
		}
	}
	q, err := s.keyOrders.order.Load(ctx, "pay", "order-1")
	if err != nil || q.Head() != keyed.ID {
		t.Fatalf("key order-1: %+v, %v; want batch %d at its head", q, err, keyed.ID)
	}
}

// TestStartQueuesWhatADeadReplicaLeft: a replica that starts (Run) queues
// a batch its predecessor recorded and died before queueing, which holds
// its label's only concurrency slot: without it the label would refuse
// every submission for good.
func TestStartQueuesWhatADeadReplicaLeft(t *testing.T) {
	s, table, env, ctx := internalServiceEnv(t, resumeTable, 20*time.Second)
	b := builtOnly(ctx, t, s, "limited", "")
	if _, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "limited", Functions: []api.CallSpec{{Type: "noop"}}}); err == nil {
		t.Fatal("a second batch under limited was accepted beside the first, whose slot it holds")
	}
	// The replica that starts next.
	next, err := New(ctx, env.Conn(t, "authz"), Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = next.Run(rctx) }()
	defer func() { stop(); <-done }()
	testnats.Eventually(t, 10*time.Second, "the batch recorded before the start is queued", func() bool {
		return slices.Contains(queuedIDs(ctx, t, next, pipeline.High), b.ID)
	})
}

// TestResumeLeavesThisReplicasSends: a batch this replica recorded after
// it began serving is its own send, queued by its request: the check at
// start leaves it alone, however late the check runs (a resume racing the
// send would queue it with a token of its own, without the send's trace
// context), while one recorded before that instant and queued nowhere is
// queued.
func TestResumeLeavesThisReplicasSends(t *testing.T) {
	s, _, ctx := internalService(t, resumeTable)
	before := builtOnly(ctx, t, s, "jobs", "")
	started := s.intake.now()
	sent := builtOnly(ctx, t, s, "jobs", "")
	r, err := s.resumeRecent(ctx, started)
	if err != nil {
		t.Fatal(err)
	}
	if r.checked != 1 || r.failed != 0 {
		t.Fatalf("%+v, want the one batch recorded before the start checked", r)
	}
	if got := queuedIDs(ctx, t, s, pipeline.High); !slices.Equal(got, []uint64{before.ID}) {
		t.Fatalf("queued %v, want only [%d] (not %d, recorded after the start)", got, before.ID, sent.ID)
	}
}

// TestResumeLeavesWhatIsQueuedOrRan: a fresh send's first token has no
// deduplication id, so the check at start reads the queues and the
// callbacks not applied yet, and queues none of the batches found there:
// one whose token waits (a second would run it twice), and ones done in
// one step (no progress written) whose callback, alone or in a group,
// waits to be applied. The batch found nowhere is queued.
func TestResumeLeavesWhatIsQueuedOrRan(t *testing.T) {
	s, _, ctx := internalService(t, resumeTable)
	fresh, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: []api.CallSpec{{Type: "noop"}}})
	if err != nil {
		t.Fatal(err)
	}
	ranAlone := builtOnly(ctx, t, s, "jobs", "")
	ranInGroup := []*pipeline.Batch{builtOnly(ctx, t, s, "jobs", ""), builtOnly(ctx, t, s, "jobs", "")}
	never := builtOnly(ctx, t, s, "jobs", "")
	done := func(b *pipeline.Batch) records.Callback {
		return records.Callback{V: 1, BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Outcome: pipeline.ExecutedOutcome(1), Attempts: 1}
	}
	cb := done(ranAlone)
	alone, err := streams.CallbackMsg(&cb)
	if err != nil {
		t.Fatal(err)
	}
	group, err := streams.CallbackGroupMsg("pay", []records.Callback{done(ranInGroup[0]), done(ranInGroup[1])})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []*nats.Msg{alone, group} {
		if _, err := s.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s.resumeRecent(ctx, s.intake.now())
	if err != nil {
		t.Fatal(err)
	}
	if r.checked != 1 || r.queued != 4 || r.failed != 0 {
		t.Fatalf("%+v, want the batch queued nowhere checked and the 4 others left queued", r)
	}
	for b, want := range map[*pipeline.Batch]int{
		{ID: fresh.ID, Domain: "pay", Priority: pipeline.High}: 1, never: 1,
		ranAlone: 0, ranInGroup[0]: 0, ranInGroup[1]: 0,
	} {
		if n := tokensOf(ctx, t, s, b); n != want {
			t.Errorf("batch %d has %d tokens, want %d", b.ID, n, want)
		}
	}
	// The send's own token is its first publish; the check's may be a
	// copy, and is marked so that its step reads the progress.
	for id, again := range map[uint64]bool{fresh.ID: false, never.ID: true} {
		seqs, err := s.removal.tokensOf(ctx, &pipeline.Batch{ID: id, Domain: "pay", Priority: pipeline.High})
		if err != nil || len(seqs) != 1 {
			t.Fatalf("batch %d: tokens %v, %v", id, seqs, err)
		}
		m, err := s.removal.queues[pipeline.High].GetMsg(ctx, seqs[0])
		if err != nil {
			t.Fatal(err)
		}
		tok, err := records.Decode[records.Token](m.Data)
		if err != nil || tok.Again != again {
			t.Errorf("batch %d's token: Again %v (%v), want %v", id, tok.Again, err, again)
		}
	}
}

// TestFreshTokensHaveNoDeduplicationID: the first token of a fresh batch
// (no idempotency key, key or run_at), sent alone or in a send_many, has
// no Nats-Msg-Id, so the server keeps no duplicate-window entry for it;
// a batch with an idempotency key, whose repeat publishes its token again,
// keeps its (id, 0, 0) deduplication id.
func TestFreshTokensHaveNoDeduplicationID(t *testing.T) {
	s, _, ctx := internalService(t, resumeTable)
	noop := []api.CallSpec{{Type: "noop"}}
	lone, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: noop})
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: noop, IdempotencyKey: "k-lone"})
	if err != nil {
		t.Fatal(err)
	}
	many, err := s.intake.sendMany(ctx, "alice", []api.SendRequest{
		{Label: "jobs", Functions: noop}, {Label: "jobs", Functions: noop, IdempotencyKey: "k-many"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A send that reaches its token past submit.FreshTokenWithin of its
	// record (its writes stalled) publishes it marked, with its id.
	stalled := builtOnly(ctx, t, s, "jobs", "")
	if err := storeNewToken(ctx, s, stalled, stalled.CreatedAt.Add(submit.FreshTokenWithin)); err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]string{lone.ID: "", keyed.ID: streams.TokenMsgID(keyed.ID, 0, 0), stalled.ID: streams.TokenMsgID(stalled.ID, 0, 0)}
	for i, want := range []bool{false, true} {
		r := many.Results[i]
		if r.ID == 0 {
			t.Fatalf("send_many batch %d not queued: %+v", i, r)
		}
		ids[r.ID] = ""
		if want {
			ids[r.ID] = streams.TokenMsgID(r.ID, 0, 0)
		}
	}
	q := s.removal.queues[pipeline.High]
	for id, want := range ids {
		seqs, err := s.removal.tokensOf(ctx, &pipeline.Batch{ID: id, Domain: "pay", Priority: pipeline.High})
		if err != nil || len(seqs) != 1 {
			t.Fatalf("batch %d: tokens %v, %v; want one", id, seqs, err)
		}
		m, err := q.GetMsg(ctx, seqs[0])
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(nats.MsgIdHdr); got != want {
			t.Errorf("batch %d's first token has Nats-Msg-Id %q, want %q", id, got, want)
		}
		if tok, err := records.Decode[records.Token](m.Data); err != nil || tok.Again != (id == stalled.ID) {
			t.Errorf("batch %d's first token: Again %v (%v), want %v", id, tok.Again, err, id == stalled.ID)
		}
	}
}

// TestResumeWaitsForASendInFlight: a fresh batch recorded just before the
// start whose send, on a replica still alive, has not published its token
// yet: the check holds it back until the send has had the time to, reads
// the queues again, and finds the send's own token there, so it queues no
// copy (a marked copy stored before the send's unmarked token could run a
// failed first step again: the unmarked one, delivered after it, would
// not read the progress).
func TestResumeWaitsForASendInFlight(t *testing.T) {
	s, _, ctx := internalService(t, resumeTable)
	inFlight := builtOnly(ctx, t, s, "jobs", "")
	held := 0
	s.resumeHold = func() {
		held++
		if err := storeNewToken(ctx, s, inFlight, s.intake.now()); err != nil {
			t.Error(err)
		}
	}
	r, err := s.resumeRecent(ctx, s.intake.now())
	if err != nil {
		t.Fatal(err)
	}
	if held != 1 || r.checked != 0 || r.queued != 1 || r.failed != 0 {
		t.Fatalf("held %d times, %+v: want the batch held once, then found queued", held, r)
	}
	seqs, err := s.removal.tokensOf(ctx, inFlight)
	if err != nil || len(seqs) != 1 {
		t.Fatalf("tokens %v, %v: want the send's one", seqs, err)
	}
	m, err := s.removal.queues[pipeline.High].GetMsg(ctx, seqs[0])
	if err != nil {
		t.Fatal(err)
	}
	if id := m.Header.Get(nats.MsgIdHdr); id != "" {
		t.Fatalf("the batch's token has Nats-Msg-Id %q: the check's copy, not the send's token", id)
	}
}
