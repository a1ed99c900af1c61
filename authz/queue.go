package authz

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// A queue's order is the stream order of its live tokens: tokens whose
// generation and step match the batch's progress and whose batch is not
// finished. Listing reads the stream with direct gets filtered to the
// domain, one round trip per token, and one progress read per token.

// queueEditor lists a queue and edits it for the owner: evict and insert,
// and pauses and resumes a domain;
// each serialised on this replica, an insert finished by any replica if
// the one that began it died.
type queueEditor struct {
	js    jetstream.JetStream
	locks jetstream.KeyValue
	// state holds the domains' pause states (pause, resume).
	state     jetstream.KeyValue
	queues    map[pipeline.Priority]jetstream.Stream
	progress  *streams.ProgressStore
	store     *recordStore
	inspect   *inspector
	scheduled *scheduledBatches
	removal   *remover
	table     func() *Table
	now       func() time.Time
	log       *slog.Logger
	// build records an inserted batch, as a send does; admit queues it
	// (keyOrders.admit).
	build func(ctx context.Context, sub *submission) (*built, error)
	admit func(ctx context.Context, b *pipeline.Batch, repeat bool, bound int) (headOrFree bool, err error)

	editMu sync.Mutex // serialises this replica's queue edits
}

// queue answers the owner's queue listing.
func (qe *queueEditor) queue(ctx context.Context, user string, req *api.QueueRequest) (any, error) {
	if err := checkQueue(req.Domain, req.Priority); err != nil {
		return nil, err
	}
	items, err := qe.live(ctx, req.Domain, req.Priority)
	if err != nil {
		return nil, err
	}
	to := req.To
	if to == 0 || to > len(items) {
		to = len(items)
	}
	if req.From < 0 || req.From > to {
		return nil, errf(api.CodeOutOfBounds, "authz: index out of bounds: range [%d, %d) of a queue of length %d", req.From, req.To, len(items))
	}
	sched, _, err := qe.scheduled.list(ctx, req.Domain, req.Priority, 0)
	if err != nil {
		return nil, err
	}
	// An empty slice answers [] as dlq does, never null.
	return &api.QueueReply{Domain: req.Domain, Priority: req.Priority, Length: len(items), Items: append([]api.QueueItem{}, items[req.From:to]...),
		Scheduled: append([]api.QueueItem{}, sched...)}, nil
}

func checkQueue(domain string, p pipeline.Priority) error {
	if err := pipeline.ValidateDomain(domain); err != nil {
		return err
	}
	return p.Validate()
}

// Live returns the live tokens of a domain's queue, in order.
func (s *Service) Live(ctx context.Context, domain string, p pipeline.Priority) ([]api.QueueItem, error) {
	return s.queueEdits.live(ctx, domain, p)
}

// live is Service.Live.
func (qe *queueEditor) live(ctx context.Context, domain string, p pipeline.Priority) ([]api.QueueItem, error) {
	var items []api.QueueItem
	_, err := qe.inspect.scanQueue(ctx, domain, p, 0, func(it api.QueueItem, _ records.Token, _ *streams.ProgressEntry) {
		items = append(items, it)
	})
	return items, err
}

func (qe *queueEditor) evict(ctx context.Context, user string, req *api.PositionRequest) (any, error) {
	if err := checkQueue(req.Domain, req.Priority); err != nil {
		return nil, err
	}
	if req.Scheduled {
		return qe.scheduled.evict(ctx, req)
	}
	qe.editMu.Lock()
	defer qe.editMu.Unlock()
	for range 10 {
		items, err := qe.live(ctx, req.Domain, req.Priority)
		if err != nil {
			return nil, err
		}
		if req.Position < 0 || req.Position >= len(items) {
			return nil, errf(api.CodeOutOfBounds, "authz: index out of bounds: position %d of a queue of length %d", req.Position, len(items))
		}
		it := items[req.Position]
		id, err := qe.removal.remove(ctx, req.Domain, it)
		if errors.Is(err, streams.ErrConflict) {
			continue // a processor moved the batch meanwhile: look again
		}
		if err != nil {
			return nil, err
		}
		qe.log.Info("batch evicted", "batch_id", id, "domain", req.Domain, "position", req.Position)
		return &api.EvictReply{ID: id}, nil
	}
	return nil, errf(api.CodeConflict, "authz: the queue kept changing; try again")
}

// edit is the intent record of an insert, written before the queue is
// touched, so a replica that dies midway leaves enough to finish the job.
type edit struct {
	Domain   string            `json:"domain"`
	Priority pipeline.Priority `json:"priority"`
	// New is the inserted batch, queued first.
	New uint64 `json:"new"`
	// Tail lists the live tokens that go behind it, in order.
	Tail []api.QueueItem `json:"tail"`
}

func (qe *queueEditor) insert(ctx context.Context, user string, req *api.InsertRequest) (any, error) {
	if err := checkQueue(req.Domain, req.Priority); err != nil {
		return nil, err
	}
	l, ok := qe.table().Labels[req.Label]
	if !ok {
		return nil, errf(api.CodeNotFound, "authz: unknown label %q", logging.Capped(req.Label))
	}
	if l.Domain != req.Domain {
		return nil, errf(api.CodeBadRequest, "authz: label %q executes in domain %q, not %q", req.Label, l.Domain, req.Domain)
	}
	if err := qe.table().allowedTypes(req.Domain, req.Functions); err != nil {
		return nil, err
	}
	qe.editMu.Lock()
	defer qe.editMu.Unlock()
	items, err := qe.live(ctx, req.Domain, req.Priority)
	if err != nil {
		return nil, err
	}
	if req.Position < 0 || req.Position > len(items) {
		return nil, errf(api.CodeOutOfBounds, "authz: index out of bounds: position %d of a queue of length %d", req.Position, len(items))
	}
	// The owner's insert bypasses the label's concurrency limit.
	b, err := qe.build(ctx, &submission{label: req.Label, l: l, user: user, calls: req.Functions, key: req.Key, prio: req.Priority, force: true})
	if err != nil {
		return nil, err
	}
	e := &edit{Domain: req.Domain, Priority: req.Priority, New: b.batch.ID, Tail: items[req.Position:]}
	data, _ := json.Marshal(e)
	key := streams.EditKey(req.Domain, req.Priority)
	if _, err := qe.locks.Create(ctx, key, data); err != nil && (errors.Is(err, jetstream.ErrKeyExists) || !qe.editLanded(ctx, key, b.batch.ID)) {
		// The queue was not taken for this batch (another replica's edit
		// holds it, or the write failed): the batch, recorded already, is
		// finished as removed, not left InProcess with no token.
		reason := "insert refused: another edit of its queue was in progress"
		if !errors.Is(err, jetstream.ErrKeyExists) {
			reason = "insert refused: the edit of its queue could not be recorded"
		}
		if werr := qe.withdraw(ctx, b.batch, reason); werr != nil {
			return nil, fmt.Errorf("authz: the edit of %s's %s queue could not be recorded (%w), and inserted batch %d is recorded but could not be removed (%w): cancel it", req.Domain, req.Priority, err, b.batch.ID, werr)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, errf(api.CodeConflict, "authz: another edit of %s's %s queue is in progress; batch %d is not queued, and is recorded as removed", req.Domain, req.Priority, b.batch.ID)
		}
		return nil, fmt.Errorf("authz: record the edit of %s's %s queue: %w; batch %d is not queued, and is recorded as removed", req.Domain, req.Priority, err, b.batch.ID)
	}
	placed, err := qe.applyEdit(ctx, e)
	if err != nil {
		return nil, err
	}
	qe.log.Info("batch inserted", "batch_id", b.batch.ID, "domain", req.Domain, "position", req.Position, "moved", len(e.Tail), "waits_for_key", !placed)
	return &api.InsertReply{ID: b.batch.ID, Position: req.Position, WaitsForKey: !placed}, nil
}

// editLanded says whether the edit record at key names batch id as the
// one it inserts: a create whose answer was lost may have been stored, and
// then the edit is this insert's to finish.
func (qe *queueEditor) editLanded(ctx context.Context, key string, id uint64) bool {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), editReadTimeout)
	defer cancel()
	e, err := qe.locks.Get(gctx, key)
	if err != nil {
		return false
	}
	var ed edit
	return json.Unmarshal(e.Value(), &ed) == nil && ed.New == id
}

// editReadTimeout bounds editLanded's read.
const editReadTimeout = 5 * time.Second

// withdraw finishes b, recorded by an insert but never queued, as removed
// (see Removal): its progress, then its callback, which records the
// outcome and frees what it holds.
func (qe *queueEditor) withdraw(ctx context.Context, b *pipeline.Batch, reason string) error {
	st, err := qe.progress.Load(ctx, b.Domain, b.ID)
	if err == nil && !removed(st) {
		err = qe.removal.markRemoved(ctx, b, st, reason)
	}
	if err == nil {
		_, err = qe.removal.retireRemoved(ctx, b, st, nil)
	}
	return err
}

// applyEdit queues the new batch, then re-appends every tail batch behind
// it with a bumped generation (so its old token dies) and deletes the old
// token. Every step is idempotent, so a half-applied edit is finished by
// running it again. A new batch that waits for its key gets no token, and
// nothing moves (placed is false).
func (qe *queueEditor) applyEdit(ctx context.Context, e *edit) (placed bool, err error) {
	rec, err := qe.store.record(ctx, e.New)
	if err != nil {
		return false, err
	}
	if placed, err = qe.admit(ctx, &rec.Batch, true, 0); err != nil {
		return false, err
	}
	for _, it := range e.Tail {
		if !placed {
			break
		}
		if err := qe.moveToBack(ctx, e.Domain, it); err != nil {
			return false, err
		}
	}
	if err := qe.locks.Delete(ctx, streams.EditKey(e.Domain, e.Priority)); err != nil {
		return false, fmt.Errorf("authz: clear the edit record: %w", err)
	}
	return placed, nil
}

// moveToBack re-appends a batch's token with the next generation. A batch
// that finished or moved meanwhile is left where it is; if its old token's
// generation was already bumped (a resumed edit), its current token is
// re-published (deduplicated) instead of bumping twice.
func (qe *queueEditor) moveToBack(ctx context.Context, domain string, it api.QueueItem) error {
	for range 10 {
		st, err := qe.progress.Load(ctx, domain, it.ID)
		if err != nil {
			return err
		}
		if st.State == records.Done || st.Rotation != it.Rotation || st.Gen > it.Gen+1 {
			return nil
		}
		rec, err := qe.store.record(ctx, it.ID)
		if err != nil {
			return err
		}
		if st.Gen == it.Gen {
			st.Gen++
			if err := qe.progress.Save(ctx, domain, st); errors.Is(err, streams.ErrConflict) {
				continue
			} else if err != nil {
				return err
			}
		}
		if err := submit.PublishToken(ctx, qe.js, &rec.Batch, st.Gen, st.Rotation); err != nil {
			return err
		}
		if err := qe.queues[rec.Batch.Priority].DeleteMsg(ctx, it.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			qe.log.Warn("moved token not deleted; it will be dropped as stale", "batch_id", it.ID, "err", err)
		}
		return nil
	}
	return errf(api.CodeConflict, "authz: batch %d kept changing while being moved", it.ID)
}

// resumeEdits finishes the inserts a replica left half done, in every
// domain the authorization table names.
func (qe *queueEditor) resumeEdits(ctx context.Context) error {
	seen := map[string]bool{}
	for _, l := range qe.table().Labels {
		if seen[l.Domain] {
			continue
		}
		seen[l.Domain] = true
		for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
			e, err := qe.locks.Get(ctx, streams.EditKey(l.Domain, p))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("authz: read edit record: %w", err)
			}
			var ed edit
			if err := json.Unmarshal(e.Value(), &ed); err != nil {
				return fmt.Errorf("authz: edit record %s: %w", e.Key(), err)
			}
			qe.log.Warn("finishing a queue edit left half done", "domain", ed.Domain, "priority", ed.Priority, "batch_id", ed.New)
			if _, err := qe.applyEdit(ctx, &ed); err != nil {
				return err
			}
		}
	}
	return nil
}

// pause pauses a domain's processors.
func (qe *queueEditor) pause(ctx context.Context, user string, req *api.DomainRequest) (any, error) {
	return qe.setPaused(ctx, user, req, true)
}

// resume resumes a domain's processors.
func (qe *queueEditor) resume(ctx context.Context, user string, req *api.DomainRequest) (any, error) {
	return qe.setPaused(ctx, user, req, false)
}

func (qe *queueEditor) setPaused(ctx context.Context, user string, req *api.DomainRequest, paused bool) (any, error) {
	if err := pipeline.ValidateDomain(req.Domain); err != nil {
		return nil, err
	}
	v, _ := json.Marshal(records.DomainState{Paused: paused, By: user, At: qe.now().UTC()})
	if _, err := qe.state.Put(ctx, req.Domain, v); err != nil {
		return nil, fmt.Errorf("authz: set pause state: %w", err)
	}
	qe.log.Info("domain state changed", "domain", req.Domain, "paused", paused, "by", user)
	return &api.StateReply{Domain: req.Domain, Paused: paused}, nil
}
