package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// deadLetters keeps the dead-letter queue: it lists dead letters, replays
// them (a batch as a new one, a callback applied again) and purges them.
type deadLetters struct {
	js         jetstream.JetStream
	nc         *nats.Conn
	dlq        jetstream.Stream
	batches    jetstream.KeyValue
	store      *recordStore
	submitters *submitterIndex
	table      func() *Table
	now        func() time.Time
	log        *slog.Logger
	tel        *telemetry.Telemetry
	// admit queues a replayed batch (keyOrders.admit); apply applies a
	// replayed callback (Service.Apply).
	admit func(ctx context.Context, b *pipeline.Batch, repeat bool, bound int) (headOrFree bool, err error)
	apply func(ctx context.Context, cb *records.Callback) error
}

// list answers the owner's dead-letter listing.
func (dq *deadLetters) list(ctx context.Context, user string, req *api.DLQRequest) (any, error) {
	if req.Limit <= 0 || req.Limit > api.MaxDLQLimit {
		req.Limit = api.DefaultDLQLimit
	}
	items, err := dq.deadLetters(ctx, req.Domain, req.From, req.Limit)
	if err != nil {
		return nil, err
	}
	out := &api.DLQReply{Items: []api.DeadLetterItem{}}
	for _, it := range items {
		out.Items = append(out.Items, it.item)
	}
	return out, nil
}

type deadLetter struct {
	item api.DeadLetterItem
	dl   records.DeadLetter
}

func (dq *deadLetters) deadLetters(ctx context.Context, domain string, from uint64, limit int) ([]deadLetter, error) {
	filter := streams.DLQSubjects
	if domain != "" {
		if err := pipeline.ValidateDomain(domain); err != nil {
			return nil, err
		}
		filter = streams.DLQSubject(domain)
	}
	var out []deadLetter
	for seq := max(from, 1); len(out) < limit; {
		rm, err := dq.dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("authz: read dead letters: %w", err)
		}
		seq = rm.Sequence + 1
		dl, err := records.Decode[records.DeadLetter](rm.Data)
		if err != nil {
			continue // a raw, undecodable token: inspect with nats stream view
		}
		it := api.DeadLetterItem{Seq: rm.Sequence, BatchID: dl.Batch.ID, Domain: dl.Domain, Outcome: dl.Outcome,
			Error: dl.Error, Attempts: dl.Attempts, Index: dl.Index, At: dl.At}
		rr, _, err := dq.replayed(ctx, rm.Sequence)
		switch {
		case err != nil:
			return nil, err
		case rr != nil && rr.Queued:
			it.ReplayedAs = rr.ID
		case rr == nil:
			if rec, err := dq.store.record(ctx, dl.Batch.ID); err == nil {
				it.ReplayedAs = rec.ReplayedAs // replayed before replays were recorded by sequence
			}
		}
		out = append(out, deadLetter{item: it, dl: dl})
	}
	return out, nil
}

func (dq *deadLetters) replay(ctx context.Context, user string, req *api.ReplayRequest) (any, error) {
	var items []deadLetter
	switch {
	case req.Seq != 0:
		got, err := dq.deadLetters(ctx, "", req.Seq, 1)
		if err != nil {
			return nil, err
		}
		if len(got) == 0 || got[0].item.Seq != req.Seq {
			return nil, errf(api.CodeNotFound, "authz: no dead letter at sequence %d", req.Seq)
		}
		items = got
	case req.All:
		got, err := dq.deadLetters(ctx, req.Domain, 1, 100000)
		if err != nil {
			return nil, err
		}
		for _, it := range got {
			if it.item.ReplayedAs == 0 {
				items = append(items, it)
			}
		}
	default:
		return nil, errf(api.CodeBadRequest, "authz: say which dead letter to replay: {\"seq\": n} or {\"domain\": d, \"all\": true}")
	}
	out := &api.ReplayReply{Replayed: []api.Replayed{}}
	for _, it := range items {
		id, err := dq.replayOne(ctx, it)
		if err != nil {
			return nil, err
		}
		out.Replayed = append(out.Replayed, api.Replayed{Seq: it.item.Seq, From: it.dl.Batch.ID, AsNew: id})
	}
	return out, nil
}

// replayOne queues a dead letter's batch again as a new batch linked to the
// original, and links the original to it. Replaying the same dead letter
// again, however much later, gives the same new batch. A dead-lettered
// callback is applied again to its own batch instead (replayCallback).
func (dq *deadLetters) replayOne(ctx context.Context, it deadLetter) (uint64, error) {
	if it.dl.Origin.Stream == streams.StreamCallbacks {
		return dq.replayCallback(ctx, it)
	}
	orig := it.dl.Batch.ID
	id, err := dq.replayBatch(ctx, it)
	if err != nil {
		return 0, err
	}
	_, err = dq.store.updateRecord(ctx, orig, func(rec *records.BatchRecord) (bool, error) {
		if rec.ReplayedAs == id {
			return false, nil
		}
		rec.ReplayedAs = id
		rec.History = append(rec.History, records.Event{At: dq.now().UTC(), What: "replayed", Detail: fmt.Sprintf("dead letter %d replayed as batch %d", it.item.Seq, id)})
		return true, nil
	})
	switch {
	case errors.Is(err, errUnrecorded):
		// The original record expired: the link lives on the new one.
	case err != nil:
		return 0, err
	}
	dq.log.Info("dead letter replayed", "seq", it.item.Seq, "from", orig, "batch_id", id)
	return id, nil
}

// replayRecord, under streams.ReplayKey in the batches bucket, says which batch
// replays the dead letter at one DLQ sequence. It is created before that
// batch is recorded, and marked queued once its token is published: a
// replay cut short by a crash is finished by the next one, and a finished
// one is answered from the record for as long as the dead letter exists,
// not only within the id log's duplicate window.
type replayRecord struct {
	ID     uint64 `json:"id"`
	Queued bool   `json:"queued,omitempty"`
}

// replayed reads the replay record of the dead letter at seq: nil if it
// was never replayed.
func (dq *deadLetters) replayed(ctx context.Context, seq uint64) (*replayRecord, uint64, error) {
	e, err := dq.batches.Get(ctx, streams.ReplayKey(seq))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("authz: read replay record of dead letter %d: %w", seq, err)
	}
	var rr replayRecord
	if err := json.Unmarshal(e.Value(), &rr); err != nil || rr.ID == 0 {
		return nil, 0, fmt.Errorf("authz: replay record of dead letter %d is corrupt (%d bytes)", seq, len(e.Value()))
	}
	return &rr, e.Revision(), nil
}

// replayBatch returns the batch that replays a dead letter, creating,
// recording and queueing it the first time, and finishing a replay an
// earlier call left half done. Every step is idempotent.
func (dq *deadLetters) replayBatch(ctx context.Context, it deadLetter) (uint64, error) {
	seq := it.item.Seq
	rr, rev, err := dq.replayed(ctx, seq)
	if err != nil {
		return 0, err
	}
	if rr == nil || !rr.Queued {
		// A type the domain no longer allows is refused before anything
		// is assigned or recorded, as at send.
		if err := dq.table().allowedFunctions(it.dl.Batch.Domain, it.dl.Batch.Functions); err != nil {
			var ae *Error
			if errors.As(err, &ae) {
				return 0, errf(ae.Code, "dead letter %d not replayed: %s", seq, ae.Message)
			}
			return 0, err
		}
	}
	idem := "replay-" + strconv.FormatUint(seq, 10)
	if rr == nil {
		if rec, err := dq.store.record(ctx, it.dl.Batch.ID); err == nil && rec.ReplayedAs != 0 {
			// Replayed before replays were recorded by sequence: the link
			// on the original is written last, so that replay is queued.
			rr = &replayRecord{ID: rec.ReplayedAs, Queued: true}
			v, _ := json.Marshal(rr)
			if _, err := dq.createReplay(ctx, seq, v); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return 0, fmt.Errorf("authz: record replay of dead letter %d: %w", seq, err)
			}
			return rr.ID, nil
		}

		// Within the duplicate window a concurrent replay gets the same id.
		id, _, err := submit.AssignID(ctx, dq.js, idem)
		if err != nil {
			return 0, err
		}
		v, _ := json.Marshal(replayRecord{ID: id})
		rev, err = dq.createReplay(ctx, seq, v)
		switch {
		case errors.Is(err, jetstream.ErrKeyExists): // a concurrent replay claimed it first
			if rr, rev, err = dq.replayed(ctx, seq); err != nil {
				return 0, err
			}
		case err != nil:
			return 0, fmt.Errorf("authz: record replay of dead letter %d: %w", seq, err)
		default:
			rr = &replayRecord{ID: id}
		}
	}
	if rr.Queued {
		return rr.ID, nil
	}
	b := it.dl.Batch
	// A replay runs now, whenever the batch it replays was scheduled for.
	b.ID, b.ReplayOf, b.CreatedAt, b.RunAt = rr.ID, it.dl.Batch.ID, dq.now().UTC(), time.Time{}
	if !b.ExpiresAt.IsZero() {
		b.ExpiresAt = time.Time{}
		if l, ok := dq.table().Labels[b.Label]; ok && l.Expiry > 0 {
			b.ExpiresAt = dq.now().Add(l.Expiry.D()).UTC()
		}
	}
	if err := b.Validate(); err != nil {
		return 0, err
	}
	if err := dq.submitters.index(ctx, b.Submitter, b.ID); err != nil {
		return 0, err
	}
	// dup: a record left by a replay cut short is this batch, and stands.
	first, err := submit.Record(ctx, dq.batches, &b, idem, true)
	if err != nil {
		return 0, err
	}
	if _, err := dq.admit(ctx, first, true, 0); err != nil {
		return 0, err
	}
	dq.tel.BatchSubmitted(ctx, first)
	v, _ := json.Marshal(replayRecord{ID: rr.ID, Queued: true})
	if err := dq.updateReplay(ctx, seq, v, rev); err != nil && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && !errors.Is(err, streams.ErrConflict) {
		return 0, fmt.Errorf("authz: mark replay of dead letter %d queued: %w", seq, err)
	}
	return rr.ID, nil
}

// A replay record lives as long as its dead letter: written with the dead
// letters' age as its time to live, which outlasts the dead letter, written
// before it. It is what makes a second replay of the dead letter give the
// same batch, so it must not go first.

func (dq *deadLetters) createReplay(ctx context.Context, seq uint64, v []byte) (uint64, error) {
	if ttl := dq.store.retention.DeadLetter; dq.store.retention.Enabled() && ttl > 0 {
		return dq.batches.Create(ctx, streams.ReplayKey(seq), v, jetstream.KeyTTL(ttl))
	}
	return dq.batches.Create(ctx, streams.ReplayKey(seq), v)
}

func (dq *deadLetters) updateReplay(ctx context.Context, seq uint64, v []byte, rev uint64) error {
	var err error
	if ttl := dq.store.retention.DeadLetter; dq.store.retention.Enabled() && ttl > 0 {
		_, err = streams.PutKeyTTL(ctx, dq.js, streams.BucketBatches, streams.ReplayKey(seq), v, rev, ttl)
	} else {
		_, err = dq.batches.Update(ctx, streams.ReplayKey(seq), v, rev)
	}
	return err
}

// replayCallback applies a dead-lettered callback again: the original from
// CALLBACKS (a dead letter written before callbacks were removed once
// acknowledged), else the bytes its dead letter kept, else the one it
// describes.
// The batch keeps its id.
func (dq *deadLetters) replayCallback(ctx context.Context, it deadLetter) (uint64, error) {
	o := it.dl.Origin
	cbs, err := dq.js.Stream(ctx, streams.StreamCallbacks)
	if err != nil {
		return 0, fmt.Errorf("authz: stream %s: %w", streams.StreamCallbacks, err)
	}
	var replay []records.Callback
	rm, err := cbs.GetMsg(ctx, o.Seq)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound) && len(it.dl.Callback) > 0:
		if replay, err = dq.callbacksOf(it, it.dl.Callback, it.dl.At); err != nil {
			return 0, err
		}
	case errors.Is(err, jetstream.ErrMsgNotFound):
		if it.dl.Outcome.Status == "" {
			return 0, errf(api.CodeNotFound, "authz: dead letter %d: its callback (%s sequence %d) is gone and was never read", it.item.Seq, o.Stream, o.Seq)
		}
		replay = []records.Callback{{BatchID: it.dl.Batch.ID, Domain: it.dl.Domain, Priority: it.dl.Batch.Priority,
			Outcome: it.dl.Outcome, Attempts: it.dl.Attempts, At: it.dl.At, Processor: "a replayed dead letter",
			Outputs: it.dl.Outputs}}
	case err != nil:
		return 0, fmt.Errorf("authz: read callback %d: %w", o.Seq, err)
	default:
		if replay, err = dq.callbacksOf(it, rm.Data, rm.Time); err != nil {
			return 0, err
		}
	}
	for i := range replay {
		cb := &replay[i]
		if err := dq.apply(ctx, cb); errors.Is(err, ErrUnreadable) {
			return 0, errf(api.CodeConflict, "authz: dead letter %d: %v", it.item.Seq, err)
		} else if err != nil {
			return 0, err
		}
		dq.log.Info("dead-lettered callback replayed", "seq", it.item.Seq, "batch_id", cb.BatchID)
	}
	return replay[0].BatchID, nil
}

// callbacksOf reads the callbacks a dead-lettered callback's bytes hold
// (a single callback, or a group) and returns those to replay: the dead
// letter's batch's, or, for a group refused whole (no batch), all of them.
// A callback without a time finished at.
func (dq *deadLetters) callbacksOf(it deadLetter, data []byte, at time.Time) ([]records.Callback, error) {
	cbs, _, err := records.DecodeCallbacks(data)
	if err != nil {
		var v uint8
		if len(cbs) > 0 {
			v = cbs[0].V
		}
		return nil, errf(api.CodeConflict, "authz: dead letter %d: %v", it.item.Seq, unreadable("callback", v, err))
	}
	if id := it.dl.Batch.ID; id != 0 && len(cbs) > 1 {
		// The member of a group that was dead-lettered alone.
		i := slices.IndexFunc(cbs, func(cb records.Callback) bool { return cb.BatchID == id })
		if i < 0 {
			return nil, errf(api.CodeConflict, "authz: dead letter %d: its callbacks hold none of batch %d", it.item.Seq, id)
		}
		cbs = cbs[i : i+1]
	}
	for i := range cbs {
		// A callback is applied only to its subject's domain, which the
		// dead letter keeps: a group refused whole was never checked
		// member by member.
		if d := it.dl.Domain; cbs[i].Domain != d {
			return nil, errf(api.CodeConflict, "authz: dead letter %d: the callback of batch %d names domain %q, but it came on %s's callback subject; nothing was replayed",
				it.item.Seq, cbs[i].BatchID, logging.Capped(cbs[i].Domain), d)
		}
		if cbs[i].At.IsZero() {
			cbs[i].At = at
		}
	}
	return cbs, nil
}
