package authz

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestSubmitCutShortAfterItsRecord: authz died (or the token's publish
// failed) after the batch's record and its submitter index were stored and
// before its token: the caller had no answer, and the batch is recorded
// InProcess, listed, and queued nowhere. Its retry with the same
// idempotency key answers the same id as a duplicate and publishes the
// token; a further retry adds no second one.
func TestSubmitCutShortAfterItsRecord(t *testing.T) {
	s, ctx := jobsService(t)
	calls := []api.CallSpec{{Type: "noop"}}
	// The submission up to its record, and then the crash.
	id := cutShort(ctx, t, s, "order-7").ID
	queued := func() []uint64 { return queuedIDs(ctx, t, s, pipeline.High) }
	if got := queued(); len(got) != 0 {
		t.Fatalf("queued %v before the retry, want nothing", got)
	}
	rec, err := s.store.record(ctx, id)
	if err != nil || rec.Status != pipeline.InProcess {
		t.Fatalf("record after the crash: %+v, %v; want InProcess", rec, err)
	}
	if listed := listAll(ctx, t, s, "alice", 10); len(listed) != 1 || listed[0] != id {
		t.Fatalf("alice's listing %v; want [%d]", listed, id)
	}
	for range 2 {
		rep, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: "order-7"})
		if err != nil {
			t.Fatal(err)
		}
		if r := rep; r.ID != id || !r.Duplicate {
			t.Fatalf("retry answered %+v, want batch %d as a duplicate", r, id)
		}
		if got := queued(); len(got) != 1 || got[0] != id {
			t.Fatalf("queued %v after the retry, want [%d]", got, id)
		}
	}
}

// TestIdempotentRetryTakesItsSlot: a submission with an idempotency key
// that got its id and died before it took a slot of its label leaves the
// slot to others; its retry takes one like any submission, and is refused
// while the label is full rather than run beyond its limit.
func TestIdempotentRetryTakesItsSlot(t *testing.T) {
	s, _, ctx := internalService(t, `labels: {limited: {domain: pay, users: [alice], mode: atomic, priority: high, max_concurrent: 1, functions: {noop: {}}}}`)
	calls := []api.CallSpec{{Type: "noop"}}
	if _, _, dup, _, err := s.intake.takeKey(ctx, "alice", "order-8", &pipeline.Batch{}); err != nil || dup {
		t.Fatalf("the first submission's id: dup %v, %v", dup, err)
	}
	// Meanwhile another batch takes the label's only slot.
	if _, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "limited", Functions: calls}); err != nil {
		t.Fatal(err)
	}
	_, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "limited", Functions: calls, IdempotencyKey: "order-8"})
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		t.Fatalf("retry while the label is full: %v, want a conflict (the label's limit)", err)
	}
	if got := queuedIDs(ctx, t, s, pipeline.High); len(got) != 1 {
		t.Fatalf("queued %v, want only the batch holding the slot", got)
	}
}

// TestRefusedSubmissionReleasesItsKey: a submission with an idempotency
// key refused for its label's concurrency after it took the key leaves
// the key expiring as a finished batch's does (finished_max_age), instead
// of taken for good; a retry before then still goes on under the key's id
// once the label has room, and then takes the time to live off the key
// (it must not expire under the batch it recorded); a refused repeat of a
// key another submission took leaves that key as it was.
func TestRefusedSubmissionReleasesItsKey(t *testing.T) {
	s, _, ctx := internalService(t, `labels: {limited: {domain: pay, users: [alice], mode: atomic, priority: high, max_concurrent: 1, functions: {noop: {}}}}`)
	calls := []api.CallSpec{{Type: "noop"}}
	holder, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "limited", Functions: calls})
	if err != nil {
		t.Fatal(err)
	}
	keyTTL := func(idem string) (uint64, string) {
		t.Helper()
		st, err := s.intake.js.Stream(ctx, "KV_"+streams.BucketBatches)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetLastMsgForSubject(ctx, "$KV."+streams.BucketBatches+"."+streams.IdempotencyKey("alice", idem))
		if err != nil {
			t.Fatalf("key %s: %v", idem, err)
		}
		return m.Sequence, m.Header.Get(jetstream.MsgTTLHeader)
	}
	_, err = s.intake.send(ctx, "alice", &api.SendRequest{Label: "limited", Functions: calls, IdempotencyKey: "order-20"})
	if ae := (*Error)(nil); !errors.As(err, &ae) || ae.Code != api.CodeConflict {
		t.Fatalf("a send while the label is full: %v, want a conflict (the label's limit)", err)
	}
	k, ok, err := s.store.idempotent(ctx, "alice", "order-20")
	if err != nil || !ok || !k.taken {
		t.Fatalf("key after the refusal: %+v (%v, %v), want taken", k, ok, err)
	}
	want := streams.TTLValue(s.store.retention.Finished)
	seq, ttl := keyTTL("order-20")
	if s.store.retention.Finished == 0 || ttl != want {
		t.Fatalf("key after the refusal: time to live %q, want %q (finished_max_age %v)", ttl, want, s.store.retention.Finished)
	}
	// Refused again, as a repeat of the key: the key is not written.
	if _, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "limited", Functions: calls, IdempotencyKey: "order-20"}); err == nil {
		t.Fatal("a repeat while the label is full was accepted")
	}
	if again, _ := keyTTL("order-20"); again != seq {
		t.Fatalf("a refused repeat rewrote the key (sequence %d, then %d)", seq, again)
	}
	// The holder finished, a retry goes on under the key's id.
	if err := s.Apply(ctx, &records.Callback{BatchID: holder.ID, Domain: "pay", Priority: pipeline.High,
		Outcome: pipeline.ExecutedOutcome(1), Attempts: 1, Processor: "test"}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "limited", Functions: calls, IdempotencyKey: "order-20"})
	if err != nil || rep.ID != k.id {
		t.Fatalf("retry with room: %+v, %v; want batch %d", rep, err, k.id)
	}
	if got := queuedIDs(ctx, t, s, pipeline.High); !slices.Equal(got, []uint64{holder.ID, k.id}) {
		t.Fatalf("queued %v, want [%d %d]", got, holder.ID, k.id)
	}
	// Its batch recorded, the key lives as long as the batch: no time to
	// live until it finished.
	if _, ttl := keyTTL("order-20"); ttl != "" {
		t.Fatalf("key of the recorded batch: time to live %q, want none until it finished", ttl)
	}
}

// TestIdempotentIDsFromTheBlock: submissions with idempotency keys take
// their ids from the replica's block, as plain ones do (so their atomic
// units share group records), and the key, taken before the record, names
// the batch: a repeat, or a concurrent duplicate, gets the same id and
// queues nothing more.
func TestIdempotentIDsFromTheBlock(t *testing.T) {
	s, ctx := jobsService(t)
	calls := []api.CallSpec{{Type: "noop"}}
	var ids []uint64
	for i, idem := range []string{"", "order-1", "", "order-2"} {
		rep, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: idem})
		if err != nil || rep.Duplicate {
			t.Fatalf("send %d: %+v, %v", i, rep, err)
		}
		ids = append(ids, rep.ID)
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] != ids[0]+uint64(i) {
			t.Fatalf("ids %v, want consecutive ids of one block", ids)
		}
	}
	k, ok, err := s.store.idempotent(ctx, "alice", "order-2")
	if err != nil || !ok || k.id != ids[3] {
		t.Fatalf("key order-2 names %+v (%v, %v), want batch %d", k, ok, err, ids[3])
	}
	// Concurrent duplicates of a new key: one batch, one token.
	const n = 8
	reps := make([]*api.SendReply, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			reps[i], errs[i] = s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: "order-3"})
		})
	}
	wg.Wait()
	first := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("concurrent send %d: %v", i, errs[i])
		}
		if reps[i].ID != reps[0].ID {
			t.Fatalf("concurrent sends answered batches %d and %d, want one", reps[0].ID, reps[i].ID)
		}
		if !reps[i].Duplicate {
			first++
		}
	}
	if first != 1 {
		t.Fatalf("%d of the concurrent sends answered as the first, want 1", first)
	}
	want := append(append([]uint64(nil), ids...), reps[0].ID)
	if got := queuedIDs(ctx, t, s, pipeline.High); !slices.Equal(got, want) {
		t.Fatalf("queued %v, want %v", got, want)
	}
}

// TestIdempotentKeyTakenRecordMissing: a submission that took its
// idempotency key and died before its record leaves the key naming an id
// with no record; a retry with the key records and queues the batch under
// that id, once, and a later one answers it as a duplicate. A key written
// once its batch finished names a batch that was recorded: with the record
// gone (expired), a resend is refused rather than run again.
func TestIdempotentKeyTakenRecordMissing(t *testing.T) {
	s, ctx := jobsService(t)
	calls := []api.CallSpec{{Type: "noop"}}
	_, id, dup, _, err := s.intake.takeKey(ctx, "alice", "order-9", &pipeline.Batch{})
	if err != nil || dup {
		t.Fatalf("the first submission's id: dup %v, %v", dup, err)
	}
	for range 2 {
		rep, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: "order-9"})
		if err != nil {
			t.Fatal(err)
		}
		if rep.ID != id || !rep.Duplicate {
			t.Fatalf("retry answered %+v, want batch %d as a duplicate", rep, id)
		}
		if got := queuedIDs(ctx, t, s, pipeline.High); !slices.Equal(got, []uint64{id}) {
			t.Fatalf("queued %v, want [%d]", got, id)
		}
	}
	if rec, err := s.store.record(ctx, id); err != nil || rec.IdempotencyKey != "order-9" {
		t.Fatalf("record %+v, %v; want batch %d recorded with its key", rec, err, id)
	}
	// A finished batch's key, its record expired.
	_, gone, _, _, err := s.intake.takeKey(ctx, "alice", "order-11", &pipeline.Batch{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.batches.Put(ctx, streams.IdempotencyKey("alice", "order-11"), idempotencyValue(gone, false)); err != nil {
		t.Fatal(err)
	}
	_, err = s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: "order-11"})
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != api.CodeConflict || !strings.Contains(ae.Message, "expired") {
		t.Fatalf("resend after the record expired: %v, want a conflict saying the record expired", err)
	}
	if _, err := s.store.record(ctx, gone); err == nil {
		t.Fatalf("batch %d recorded by the resend", gone)
	}
}

// TestRetryAfterCancelQueuesNothing: a submission cut short after its
// record, then cancelled by its owner before its callback is applied, is
// not queued by its retry with the same idempotency key: the retry
// answers the batch, and the cancelled batch never runs.
func TestRetryAfterCancelQueuesNothing(t *testing.T) {
	s, ctx := jobsService(t)
	calls := []api.CallSpec{{Type: "noop"}}
	b := cutShort(ctx, t, s, "order-10")
	if _, err := s.removal.cancel(ctx, "alice", &api.IDRequest{ID: b.ID}); err != nil {
		t.Fatal(err)
	}
	rep, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: "order-10"})
	if err != nil {
		t.Fatal(err)
	}
	if r := rep; r.ID != b.ID || !r.Duplicate {
		t.Fatalf("retry answered %+v, want batch %d as a duplicate", r, b.ID)
	}
	if n := tokensOf(ctx, t, s, b); n != 0 {
		t.Fatalf("%d tokens of the cancelled batch after its retry, want none", n)
	}
}

// jobsService is an authz service whose label jobs lets alice submit noop
// calls to domain pay at high priority.
func jobsService(t *testing.T) (*Service, context.Context) {
	s, _, ctx := internalService(t, `labels: {jobs: {domain: pay, users: [alice], mode: atomic, priority: high, functions: {noop: {}}}}`)
	return s, ctx
}

// cutShort records alice's submission of one noop under jobs, with
// idempotency key idem, up to its record: as if authz died before its
// token.
func cutShort(ctx context.Context, t *testing.T, s *Service, idem string) *pipeline.Batch {
	t.Helper()
	l := s.Table().Labels["jobs"]
	b, err := s.intake.build(ctx, &submission{label: "jobs", l: l, user: "alice", calls: []api.CallSpec{{Type: "noop"}}, idem: idem, prio: l.Priority})
	if err != nil {
		t.Fatal(err)
	}
	return b.batch
}

// tokensOf counts batch b's tokens in its queue, live or stale.
func tokensOf(ctx context.Context, t *testing.T, s *Service, b *pipeline.Batch) int {
	t.Helper()
	seqs, err := s.removal.tokensOf(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	return len(seqs)
}

// TestEnsureQueued: the repair loop's queueing of a batch without a key
// gives a recorded batch that never ran one token, however often it is
// asked, and none to a batch cancelled or one that ran. If the failed
// publish stored the token after all, a batch with an idempotency key
// keeps that one (the same deduplication id); a fresh batch's had none,
// so the loop's token is a second, marked to read the progress before it
// runs anything (a copy costs a step, see TestCopyOfAFirstTokenRunsNothingTwice).
func TestEnsureQueued(t *testing.T) {
	s, ctx := jobsService(t)
	record := func() *pipeline.Batch { return cutShort(ctx, t, s, "") }
	never := record()
	for range 2 {
		if err := s.keyRepair.ensureQueued(ctx, "pay", never.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := tokensOf(ctx, t, s, never); n != 1 {
		t.Fatalf("%d tokens of a batch that never ran, want 1", n)
	}

	// Their publish stored the token, but their sends failed.
	stored := cutShort(ctx, t, s, "k-stored")
	if err := submit.PublishTokenAcked(ctx, s.js, s.intake.acks, stored, 0, 0); err != nil {
		t.Fatal(err)
	}
	fresh := record()
	if err := storeNewToken(ctx, s, fresh, s.intake.now()); err != nil {
		t.Fatal(err)
	}
	for b, want := range map[*pipeline.Batch]int{stored: 1, fresh: 2} {
		if err := s.keyRepair.ensureQueued(ctx, "pay", b.ID); err != nil {
			t.Fatal(err)
		}
		if n := tokensOf(ctx, t, s, b); n != want {
			t.Fatalf("%d tokens of batch %d whose token was stored, want %d", n, b.ID, want)
		}
	}
	seqs, err := s.removal.tokensOf(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, seq := range seqs {
		m, err := s.removal.queues[fresh.Priority].GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if tok, err := records.Decode[records.Token](m.Data); err == nil && tok.Again {
			marked++
		}
	}
	if marked != 1 {
		t.Fatalf("%d of the fresh batch's tokens marked Again, want the loop's one", marked)
	}

	cancelled := record()
	if _, err := s.removal.cancel(ctx, "alice", &api.IDRequest{ID: cancelled.ID}); err != nil {
		t.Fatal(err)
	}
	ran := record()
	if err := s.store.progress.Save(ctx, "pay", &streams.ProgressEntry{Progress: records.Progress{BatchID: ran.ID, State: records.Queued, Rotation: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{cancelled.ID, ran.ID, 1 << 40} {
		if err := s.keyRepair.ensureQueued(ctx, "pay", id); err != nil {
			t.Fatalf("batch %d: %v", id, err)
		}
	}
	for _, b := range []*pipeline.Batch{cancelled, ran} {
		if n := tokensOf(ctx, t, s, b); n != 0 {
			t.Fatalf("%d tokens of batch %d, cancelled or run, want none", n, b.ID)
		}
	}
}

// TestRepairsTakeTurns: the repair loop takes each batch once however
// often it is handed over, and one it cannot queue yet (its record
// unreadable) does not hold back the next; once the loop stops, nothing
// more is taken, and a send says so.
func TestRepairsTakeTurns(t *testing.T) {
	s, ctx := jobsService(t)
	if s.keyRepair.repairBatch("pay", 1) {
		t.Fatal("a batch was taken for repair before the loop runs")
	}
	const spoiled = 1 << 40
	if _, err := s.store.batches.Put(ctx, streams.BatchKey(spoiled), []byte("not a record")); err != nil {
		t.Fatal(err)
	}
	good := cutShort(ctx, t, s, "")
	loopCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.keyRepair.run(loopCtx) }()
	testnats.Eventually(t, 5*time.Second, "the loop takes hand-overs", func() bool { return s.keyRepair.repairBatch("pay", spoiled) })
	for range 3 {
		if !s.keyRepair.repairBatch("pay", good.ID) {
			t.Fatal("a batch was not taken for repair")
		}
	}
	testnats.Eventually(t, 10*time.Second, "the good batch queued past the spoiled one", func() bool {
		return tokensOf(ctx, t, s, good) == 1
	})
	// A hand-over that came during a try makes the loop try again: the
	// good batch leaves the pending set once a try outlasts its hand-overs.
	testnats.Eventually(t, 10*time.Second, "the spoiled batch alone pending", func() bool {
		s.keyRepair.repairs.mu.Lock()
		defer s.keyRepair.repairs.mu.Unlock()
		_, still := s.keyRepair.repairs.pending[repairRef{domain: "pay", id: spoiled}]
		return still && len(s.keyRepair.repairs.pending) == 1
	})
	if n := tokensOf(ctx, t, s, good); n != 1 {
		t.Fatalf("%d tokens of the good batch, want 1", n)
	}
	stop()
	testnats.Stopped(t, "repair loop", done)
	if s.keyRepair.repairBatch("pay", good.ID) {
		t.Fatal("a batch was taken for repair after the loop stopped")
	}
}

// TestSendManyIdempotentTogether: a send_many's batches with idempotency
// keys go together with its plain ones: new keys are taken all at once, a
// key written before answers its batch as a duplicate (or goes on under
// the id it names when that batch was never recorded), and a key reused
// for another submission is a 409; each batch is queued once.
func TestSendManyIdempotentTogether(t *testing.T) {
	s, ctx := jobsService(t)
	calls := []api.CallSpec{{Type: "noop"}}
	old, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: calls, IdempotencyKey: "old"})
	if err != nil {
		t.Fatal(err)
	}
	_, taken, _, _, err := s.intake.takeKey(ctx, "alice", "cut-short", &pipeline.Batch{})
	if err != nil {
		t.Fatal(err)
	}
	other := []api.CallSpec{{Type: "noop", Payload: pipeline.Payload(`{"n":1}`)}}
	reqs := []api.SendRequest{
		{Label: "jobs", Functions: calls, IdempotencyKey: "new-1"},
		{Label: "jobs", Functions: calls},
		{Label: "jobs", Functions: calls, IdempotencyKey: "old"},
		{Label: "jobs", Functions: calls, IdempotencyKey: "new-2"},
		{Label: "jobs", Functions: calls, IdempotencyKey: "cut-short"},
		{Label: "jobs", Functions: other, IdempotencyKey: "new-1"},
	}
	out, err := s.intake.sendMany(ctx, "alice", reqs)
	if err != nil {
		t.Fatal(err)
	}
	r := out.Results
	for i, want := range []uint64{r[0].ID, r[0].ID + 1, old.ID, r[0].ID + 3, taken} {
		if r[i].Failed() || r[i].ID != want || r[i].Duplicate != (i == 2 || i == 4) {
			t.Fatalf("batch %d: %+v, want batch %d (duplicate %v)", i, r[i], want, i == 2 || i == 4)
		}
	}
	if r[5].Code != api.CodeConflict || !strings.Contains(r[5].Error, `"new-1"`) {
		t.Fatalf("a key reused for another submission: %+v, want 409 naming it", r[5])
	}
	want := []uint64{old.ID, r[0].ID, r[0].ID + 1, r[0].ID + 3, taken}
	slices.Sort(want)
	got := queuedIDs(ctx, t, s, pipeline.High)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("queued %v, want %v", got, want)
	}
	for _, i := range []int{0, 3} {
		rec, err := s.store.record(ctx, r[i].ID)
		if err != nil || rec.IdempotencyKey != reqs[i].IdempotencyKey {
			t.Fatalf("batch %d's record: %+v, %v; want its idempotency key", i, rec, err)
		}
	}
	again, err := s.intake.sendMany(ctx, "alice", reqs[:5])
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range again.Results {
		keyed := reqs[i].IdempotencyKey != ""
		if a.Failed() || a.Duplicate != keyed || (a.ID == r[i].ID) != keyed {
			t.Fatalf("again, batch %d: %+v, want batch %d as a duplicate, or a new batch without a key", i, a, r[i].ID)
		}
	}
	if got := queuedIDs(ctx, t, s, pipeline.High); len(got) != len(want)+1 {
		t.Fatalf("queued %v after the request again, want one more (its plain batch)", got)
	}
}

// TestKeyPlainBeforeTerminalRecord: a batch's idempotency key no longer
// says taken once its record is written terminal (which may expire): the
// key is rewritten before that write, so that a resend after the record
// expired is refused rather than recorded again.
func TestKeyPlainBeforeTerminalRecord(t *testing.T) {
	s, ctx := jobsService(t)
	rep, err := s.intake.send(ctx, "alice", &api.SendRequest{Label: "jobs", Functions: []api.CallSpec{{Type: "noop"}}, IdempotencyKey: "order-12"})
	if err != nil {
		t.Fatal(err)
	}
	if k, _, _ := s.store.idempotent(ctx, "alice", "order-12"); !k.taken {
		t.Fatalf("key before the batch finished: %+v, want taken", k)
	}
	_, err = s.store.updateRecord(ctx, rep.ID, func(rec *records.BatchRecord) (bool, error) {
		rec.Status, rec.FinishedAt = pipeline.Executed, time.Now().UTC()
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	k, ok, err := s.store.idempotent(ctx, "alice", "order-12")
	if err != nil || !ok || k.taken || k.id != rep.ID {
		t.Fatalf("key after the terminal record: %+v (%v, %v), want batch %d, not taken", k, ok, err, rep.ID)
	}
}

// storeNewToken publishes b's first token as a send does at now
// (submit.StartNewToken) and waits until it is stored.
func storeNewToken(ctx context.Context, s *Service, b *pipeline.Batch, now time.Time) error {
	tok, err := submit.StartNewToken(ctx, s.intake.acks, b, now)
	if err != nil {
		return err
	}
	return tok.Wait(ctx, s.js)
}
