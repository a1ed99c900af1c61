package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/pipeline"
)

// A submission records its batch, then queues it (its token, or its key's
// order, or its schedule). An authz replica that dies between the two
// leaves the batch recorded InProcess and queued nowhere: it never runs,
// never calls back, and holds its label's concurrency slots for good. Its
// caller had no answer; with an idempotency key its retry queues it, and
// without one nothing did.
//
// So every replica, as it starts, gives the batches recorded shortly
// before its start what a retry with the same idempotency key would give
// them (admit, as a repeat): a batch that never ran is queued, its token
// deduplicated by the queue's duplicate window if it was queued after all;
// one that ran, finished or was cancelled is left alone. A fresh batch's
// first token has no deduplication id (streams.NewTokenMsg), so the
// replica first reads which batches are queued (a first token in a
// queue) or ran (a callback in CALLBACKS, not yet applied: a batch done in
// one step writes no progress) and leaves those alone: only a token
// stored between that read and the records' (a send of another replica,
// recorded before this start) can be queued twice, and a second token of
// a batch is harmless (see startIfNeverRan). It looks back
// only as far as that window makes a second token harmless: a batch
// recorded longer ago may have been queued and its token taken and
// acknowledged, and a second one would run it again beside its first
// (see startIfNeverRan). A replica restarted within that window (a
// crash under a supervisor, a rolling deploy) queues what the one before
// it left half done.

// resumeMargin is taken off the queues' duplicate window for the clocks of
// the replicas (a record's CreatedAt is its replica's time) and the time
// the check of one batch takes.
const resumeMargin = 15 * time.Second

// resumeLogged bounds the failures resumeRecent logs one by one (a
// queue's stream down at the start would fail every batch); the rest are
// counted in its last line.
const resumeLogged = 10

// resumeReadTries and resumeReadPause bound the start's read of the
// queued tokens and pending callbacks: a failed read is tried again after
// the pause, up to the tries, before the check gives up.
const (
	resumeReadTries = 5
	resumeReadPause = 2 * time.Second
)

// resumed counts what resumeRecent found.
type resumed struct {
	checked, old, failed int
	// queued counts the batches left alone because a first token of
	// theirs is in a queue or a callback of theirs waits to be applied.
	queued int
}

// resumeAtStart runs resumeRecent for the replica that started serving
// at started, and logs what it found.
func (s *Service) resumeAtStart(ctx context.Context, started time.Time) {
	r, err := s.resumeRecent(ctx, started)
	if err != nil && ctx.Err() == nil {
		s.log.Warn("batches recorded before this start not all checked", "checked", r.checked, "err", err)
		return
	}
	if r.checked > 0 || r.queued > 0 || r.failed > 0 {
		s.log.Info("batches recorded before this start checked: those that never ran are queued", "checked", r.checked, "queued_or_ran", r.queued, "older_than_window", r.old, "failed", r.failed)
	}
}

// resumeRecent gives every batch recorded in the window before started
// (the instant before this replica began serving requests), not finished,
// what a retry of its submission would (admit, as a repeat). A batch it
// cannot queue now is handed to the repair loop; one recorded before the
// window, or whose record does not decode, is left as it is, and so is
// every batch recorded from started on: this replica's own sends, queued
// by their requests (a resume racing one could queue its batch with a
// token of its own, without the send's trace context).
func (s *Service) resumeRecent(ctx context.Context, started time.Time) (resumed, error) {
	var r resumed
	window, err := s.resumeWindow(ctx)
	if err != nil || window <= 0 {
		return r, err
	}
	now := started
	since := now.Add(-window)
	seq, err := s.firstBatchesSeqSince(ctx, since)
	if err != nil || seq == 0 {
		return r, err
	}
	// Read before the records: a batch whose token is acknowledged after
	// this read published its callback before (the processor's order), and
	// that callback is read below or applied before its record is.
	seen, err := s.readQueuedOrRan(ctx, since)
	if err != nil {
		return r, err
	}
	// young are the batches recorded so shortly before the start that
	// their send, on another replica still alive, may not have published
	// their first token yet: checked once it has had the time to.
	var young []uint64
	done := func() (resumed, error) { return r, s.resumeYoung(ctx, since, now, young, &r) }
	w, err := s.store.batches.WatchAll(ctx, jetstream.ResumeFromRevision(seq), jetstream.IgnoreDeletes())
	if err != nil {
		return r, fmt.Errorf("authz: watch the batch records since %v: %w", since, err)
	}
	defer func() {
		_ = w.Stop()
		// A delivery may be on its way into Updates: read until the
		// watcher closes it, which it does once its subscription ends.
		for range w.Updates() {
		}
	}()
	for {
		var e jetstream.KeyValueEntry
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case e = <-w.Updates():
		}
		if e == nil {
			return done() // every record up to the watch's start
		}
		if !e.Created().Before(now) {
			return done() // recorded after this replica started
		}
		id, err := strconv.ParseUint(e.Key(), 10, 64)
		if err != nil {
			continue // an idempotency key, not a record
		}
		rec, err := records.Decode[records.BatchRecord](e.Value())
		if err != nil {
			r.fail(s, "batch record not checked at start: it does not decode", id, err)
			continue
		}
		if rec.Status.Terminal() {
			continue
		}
		if s.intake.now().Sub(rec.Batch.CreatedAt) >= window {
			r.old++
			continue
		}
		if _, ok := seen[id]; ok {
			r.queued++
			continue
		}
		if now.Sub(rec.Batch.CreatedAt) < submit.FreshTokenWithin+resumeSkew {
			young = append(young, id)
			continue
		}
		s.resumeCounted(ctx, &rec.Batch, &r)
	}
}

// resume gives recorded batch b what a retry of its submission would: a
// token (or a schedule) if it never ran, its place in its key's order if
// it has none. What cannot be done now is handed to the repair loop.
func (s *Service) resume(ctx context.Context, b *pipeline.Batch) error {
	tctx, cancel := context.WithTimeout(ctx, repairTry)
	defer cancel()
	_, err := s.keyOrders.admit(tctx, b, true, 0)
	if err == nil || b.Key != "" {
		// admit hands a key it could not repair to the loop itself.
		return err
	}
	if !s.keyRepair.repairBatch(b.Domain, b.ID) {
		return fmt.Errorf("%w; %w", err, errNotHanded)
	}
	return err
}

// resumeCounted is resume for a batch the check found queued nowhere,
// counted in r.
func (s *Service) resumeCounted(ctx context.Context, b *pipeline.Batch, r *resumed) {
	r.checked++
	if err := s.resume(ctx, b); err != nil {
		r.fail(s, "batch not checked at start", b.ID, err)
	}
}

// fail counts a batch the check could not check, and logs the first
// resumeLogged of them.
func (r *resumed) fail(s *Service, msg string, id uint64, err error) {
	r.failed++
	if r.failed <= resumeLogged {
		s.log.Warn(msg, "batch_id", id, "err", err)
	}
}

// resumeSkew is what the hold of the young batches allows for the
// difference between the clocks of two replicas (a record's CreatedAt is
// its replica's time); resumeMargin allows more for the window's start,
// where a batch found too old is only left alone.
const resumeSkew = time.Second

// resumeYoung checks the young batches resumeRecent held back: a send
// publishes a fresh batch's first token without a deduplication id only
// within submit.FreshTokenWithin of its record (a later one is marked and
// has the id), so once that time has passed since started, every such
// token a live replica was about to publish is stored. The queues and the
// callbacks are read again, then each held batch's record, and those found
// neither queued, nor run, nor finished get what resumeRecent gives the
// others: a marked copy is stored only after the send's own token, whose
// first step, taken first, leaves its progress for the copy to read.
func (s *Service) resumeYoung(ctx context.Context, since, started time.Time, ids []uint64, r *resumed) error {
	if len(ids) == 0 {
		return nil
	}
	if s.resumeHold != nil {
		s.resumeHold()
	}
	if wait := started.Add(submit.FreshTokenWithin + resumeSkew).Sub(s.intake.now()); wait > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	seen, err := s.readQueuedOrRan(ctx, since)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, ok := seen[id]; ok {
			r.queued++
			continue
		}
		rec, err := s.store.record(ctx, id)
		if err != nil {
			r.fail(s, "batch not checked at start", id, err)
			continue
		}
		if rec.Status.Terminal() {
			continue
		}
		s.resumeCounted(ctx, &rec.Batch, r)
	}
	return nil
}

// readQueuedOrRan is queuedOrRanSince, tried again after a failure (a
// stream electing its leader after a restart, say): the check waits, and
// the batches it is for wait as long.
func (s *Service) readQueuedOrRan(ctx context.Context, since time.Time) (map[uint64]struct{}, error) {
	for try := 1; ; try++ {
		seen, err := s.queuedOrRanSince(ctx, since)
		if err == nil || try == resumeReadTries {
			return seen, err
		}
		s.log.Warn("queued tokens and pending callbacks not read; trying again", "try", try, "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(resumeReadPause):
		}
	}
}

// queuedOrRanSince returns the ids of the batches with a first token in
// a queue stored since since (a batch recorded since then has its tokens
// stored after it), or a callback in CALLBACKS, not applied yet: those are
// queued or ran, and resumeRecent leaves them alone. The queues' tokens of
// the window are read once, 256 a round trip, from any replica of a
// replicated queue: one read from a follower behind its leader can miss
// the newest tokens, and their batches get a second token, marked to read
// the progress (a step each).
func (s *Service) queuedOrRanSince(ctx context.Context, since time.Time) (map[uint64]struct{}, error) {
	seen := map[uint64]struct{}{}
	add := func(v string) {
		if id, err := strconv.ParseUint(v, 10, 64); err == nil && id > 0 {
			seen[id] = struct{}{}
		}
	}
	for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		err := jsapi.DirectScan(ctx, s.nc, streams.QueueStream(p), streams.TokenSubject(p, "*"), since, func(m *nats.Msg) error {
			add(m.Header.Get(streams.HeaderBatchID))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("authz: read the tokens queued since %v: %w", since, err)
		}
	}
	// CALLBACKS holds the callbacks not applied yet, a few unless authz
	// was down: read one by one (the stream allows no direct gets).
	cbs, err := s.js.Stream(ctx, streams.StreamCallbacks)
	if err != nil {
		return nil, fmt.Errorf("authz: read the callbacks not applied yet: %w", err)
	}
	for seq := uint64(1); ; {
		rm, err := cbs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(streams.CallbackSubject("*")))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return seen, nil
		}
		if err != nil {
			return nil, fmt.Errorf("authz: read the callbacks not applied yet: %w", err)
		}
		seq = rm.Sequence + 1
		if rm.Header.Get(streams.HeaderKind) != streams.KindCallbacks {
			add(rm.Header.Get(streams.HeaderBatchID))
			continue
		}
		g, err := records.Decode[records.CallbackGroup](rm.Data)
		if err != nil {
			continue // a group that does not decode is dead-lettered when applied
		}
		for i := range g.Callbacks {
			seen[g.Callbacks[i].BatchID] = struct{}{}
		}
	}
}

// resumeWindow is how far back resumeRecent looks: the shorter of the
// queues' duplicate windows, less resumeMargin.
func (s *Service) resumeWindow(ctx context.Context) (time.Duration, error) {
	window := time.Duration(0)
	for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		st, err := s.js.Stream(ctx, streams.QueueStream(p))
		if err != nil {
			return 0, fmt.Errorf("authz: read the duplicate window of queue %s: %w", p, err)
		}
		if d := st.CachedInfo().Config.Duplicates; window == 0 || d < window {
			window = d
		}
	}
	return window - resumeMargin, nil
}

// firstBatchesSeqSince is the sequence of the first message of the batches
// bucket's stream stored at or after since; 0 when there is none.
func (s *Service) firstBatchesSeqSince(ctx context.Context, since time.Time) (uint64, error) {
	body, err := json.Marshal(struct {
		StartTime time.Time `json:"start_time"`
	}{since.UTC()})
	if err != nil {
		return 0, err
	}
	m, err := s.nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET.KV_"+streams.BucketBatches, body)
	var seq uint64
	if err == nil {
		_, seq, err = jsapi.ReadDirectGet(m)
	}
	switch {
	case errors.Is(err, jsapi.ErrNoValue):
		return 0, nil // nothing stored since
	case err != nil:
		return 0, fmt.Errorf("authz: find the batch records since %v: %w", since, err)
	}
	return seq, nil
}
