package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// A submitter's own batches: listed newest first through the submitter
// index (a batches-bucket key streams.SubmitterKey per submitter and
// window of streams.SubmitterWindow batch ids holding one of theirs,
// written before the first of them is accepted), and cancelled by id.

// indexMarks remembers the index keys this replica wrote or is writing,
// so that the submissions of one window share a write: a submitter's
// batches in a row take ids of one block, and most of them find their
// window's key stored a moment ago. A key stored is trusted for
// indexMarkTTL only, so that a key lost afterwards (purged by hand, a
// store restored from a backup) is written again by the next submission
// in its window. Forgetting one costs a second write of the same key,
// nothing more; so does a window shared with another replica.
type indexMarks struct {
	mu    sync.Mutex
	marks map[indexMark]*indexWrite
}

type indexMark struct {
	user   string
	window uint64
}

// indexWrite is one index key's write: done is closed once it is stored
// (err nil, at stored) or failed.
type indexWrite struct {
	done   chan struct{}
	err    error
	stored time.Time
}

const (
	// indexMarkTTL is how long a stored index key is taken as stored
	// without writing it again: a busy submitter fills a window well
	// within it, and a sparse one writes its key with each batch, as
	// every submission did before keys stood for windows.
	indexMarkTTL = time.Second
	// maxIndexMarks bounds indexMarks: past it, the writes that ended
	// and are no longer trusted are forgotten.
	maxIndexMarks = 4096
)

// startIndex makes sure the index key of batch id's window is written,
// without waiting for it, so that the write overlaps the record's; wait
// with indexed. A window whose key this replica is storing, or stored
// within indexMarkTTL, is not written again; one whose write failed is.
func (s *Service) startIndex(user string, id uint64) (*indexWrite, error) {
	k := indexMark{user: user, window: streams.SubmitterWindowOf(id)}
	now := s.opts.Now()
	m := &s.indexMarks
	m.mu.Lock()
	if w := m.marks[k]; w != nil && w.trusted(now) {
		m.mu.Unlock()
		return w, nil
	}
	if m.marks == nil {
		m.marks = make(map[indexMark]*indexWrite)
	}
	if len(m.marks) >= maxIndexMarks {
		for k, w := range m.marks {
			if w.ended() && !w.trusted(now) {
				delete(m.marks, k)
			}
		}
	}
	w := &indexWrite{done: make(chan struct{})}
	m.marks[k] = w
	m.mu.Unlock()
	pa, err := s.acks.Publish(&nats.Msg{Subject: indexSubject(user, id)})
	if err != nil {
		w.err = err
		close(w.done)
		return nil, fmt.Errorf("authz: index the batch under its submitter: %w", err)
	}
	// Its own wait, bounded by the publisher's timeout: the submissions
	// sharing it each wait as long as their own context allows.
	go func() {
		if _, w.err = pa.Wait(context.Background()); w.err == nil {
			w.stored = s.opts.Now()
		}
		close(w.done)
	}()
	return w, nil
}

func (w *indexWrite) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// trusted: still being written, or stored less than indexMarkTTL ago.
func (w *indexWrite) trusted(now time.Time) bool {
	return !w.ended() || w.err == nil && now.Sub(w.stored) < indexMarkTTL
}

// indexed waits until the index key of batch id's window is stored, by w
// (from startIndex). When w failed, it was shared by the submissions of
// the window, so each of them writes the key once more on its own before
// giving up: one lost publish fails none of them.
func (s *Service) indexed(ctx context.Context, user string, id uint64, w *indexWrite) error {
	err := waitIndex(ctx, w)
	if err == nil || ctx.Err() != nil {
		return err
	}
	if w, err = s.startIndex(user, id); err != nil {
		return err
	}
	return waitIndex(ctx, w)
}

func waitIndex(ctx context.Context, w *indexWrite) error {
	select {
	case <-w.done:
		if w.err != nil {
			return fmt.Errorf("authz: index the batch under its submitter: %w", w.err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("authz: index the batch under its submitter: %w", ctx.Err())
	}
}

// index writes the submitter index key of batch id and waits for it.
func (s *Service) index(ctx context.Context, user string, id uint64) error {
	w, err := s.startIndex(user, id)
	if err != nil {
		return err
	}
	return s.indexed(ctx, user, id, w)
}

func indexSubject(user string, id uint64) string {
	return "$KV." + streams.BucketBatches + "." + streams.SubmitterKey(user, id)
}

// Bounds of a listing of one's own batches.
const (
	// DefaultListLimit is the page size of a ListRequest without a limit.
	DefaultListLimit = 50
	// MaxListLimit is the largest page size of a ListRequest.
	MaxListLimit = 500
	// listReadsPerItem bounds the windows of ids (streams.SubmitterWindow
	// records each) a page reads, per item asked for: past it the page
	// comes back short, with Next to go on.
	listReadsPerItem = 4
)

// ListRequest pages through the caller's batches, newest first.
type ListRequest struct {
	// Status, when set, keeps only batches in that status (InProcess,
	// Executed, Rejected, PartiallyExecuted, RemovedByOwner, Expired).
	Status pipeline.Status `json:"status,omitempty"`
	// Before is the cursor: only batches with a smaller id, 0 for the
	// newest. Pass the previous page's Next.
	Before uint64 `json:"before,omitempty"`
	// Limit is the page size: 1 to MaxListLimit, 0 for DefaultListLimit.
	Limit int `json:"limit,omitempty"`
	// Submitter lists another user's batches: the owner only.
	Submitter string `json:"submitter,omitempty"`
}

// BatchSummary is one line of a listing.
type BatchSummary struct {
	ID        uint64            `json:"id"`
	Label     string            `json:"label"`
	Domain    string            `json:"domain"`
	Priority  pipeline.Priority `json:"priority"`
	Status    pipeline.Status   `json:"status"`
	Outcome   string            `json:"outcome,omitempty"`
	Attempts  int               `json:"attempts"`
	Functions int               `json:"functions"`
	// DeadLetter is the DLQ sequence of the batch's dead letter, if any.
	DeadLetter uint64    `json:"dead_letter,omitempty"`
	ReplayOf   uint64    `json:"replay_of,omitempty"`
	ReplayedAs uint64    `json:"replayed_as,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// ListReply is a page of batches, newest first.
type ListReply struct {
	Items []BatchSummary `json:"items"`
	// Next is the cursor of the next page (its Before); 0 when there is none.
	Next uint64 `json:"next,omitempty"`
}

var statuses = []pipeline.Status{pipeline.InProcess, pipeline.Executed, pipeline.Rejected,
	pipeline.PartiallyExecuted, pipeline.RemovedByOwner, pipeline.Expired}

// list answers a page of the caller's batches. It reads the caller's index
// keys (one subject-filtered listing of the batches bucket: its cost grows
// with the caller's windows of ids, not with everyone's batches), then the
// records of the windows, newest first, each window's read together; at
// most listReadsPerItem windows per item asked for, so that a rare status
// cannot make one page read everything.
func (s *Service) list(ctx context.Context, user string, req *ListRequest) (any, error) {
	who := user
	if req.Submitter != "" && req.Submitter != user {
		if err := s.owner(user); err != nil {
			return nil, errf(CodeForbidden, "authz: only the owner may list another user's batches (you are %q)", user)
		}
		if err := pipeline.ValidateDomain(req.Submitter); err != nil {
			return nil, errf(CodeBadRequest, "authz: submitter %q: expected a user name without '.', '*', '>' or spaces", logging.Capped(req.Submitter))
		}
		who = req.Submitter
	}
	if req.Status != "" && !slices.Contains(statuses, req.Status) {
		return nil, errf(CodeBadRequest, "authz: status %q: expected one of %v, or none for all", logging.Capped(string(req.Status)), statuses)
	}
	var err error
	if req.Limit, err = pageLimit(req.Limit, DefaultListLimit, MaxListLimit); err != nil {
		return nil, err
	}
	windows, err := s.submitted(ctx, who, req.Before)
	if err != nil {
		return nil, err
	}
	out := &ListReply{Items: []BatchSummary{}}
	var seen uint64 // the smallest id looked at
	for i, w := range windows {
		if i == req.Limit*listReadsPerItem {
			out.Next = seen
			break
		}
		recs, err := s.windowRecords(ctx, w, req.Before)
		if err != nil {
			return nil, err
		}
		for j, rec := range recs {
			if rec.Batch.Submitter != who || (req.Status != "" && rec.Status != req.Status) {
				continue // another's in the same window, or not the status asked for
			}
			out.Items = append(out.Items, summary(rec))
			if len(out.Items) == req.Limit {
				if j < len(recs)-1 || i < len(windows)-1 {
					out.Next = rec.Batch.ID // more may follow: the next page says
				}
				return out, nil
			}
		}
		seen = w
	}
	return out, nil
}

// submitted returns the first ids of the windows holding user's batches
// below before (0: all), newest first.
func (s *Service) submitted(ctx context.Context, user string, before uint64) ([]uint64, error) {
	keys, err := s.batches.ListKeysFiltered(ctx, streams.SubmitterFilter(user))
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("authz: list the batches of %s: %w", user, err)
	}
	defer func() { _ = keys.Stop() }()
	var windows []uint64
	for k := range keys.Keys() {
		if w, ok := streams.ParseSubmitterKey(k); ok && (before == 0 || w < before) {
			windows = append(windows, w)
		}
	}
	slices.SortFunc(windows, func(a, b uint64) int { return cmpID(b, a) })
	return slices.Compact(windows), nil
}

// windowRecords reads the records of the ids of window w below before (0:
// all), with one pipelined direct get each, and returns those found,
// newest first. An id without a record is skipped: one not taken (yet),
// or one refused before its record was written.
func (s *Service) windowRecords(ctx context.Context, w, before uint64) ([]*streams.BatchRecord, error) {
	last := w + streams.SubmitterWindow - 1
	if before != 0 && last >= before {
		last = before - 1
	}
	var gets []*streams.PendingAck
	defer func() {
		for _, g := range gets {
			if g != nil {
				g.Forget()
			}
		}
	}()
	for id := last; id >= w && id != 0; id-- {
		g, err := s.acks.Request(streams.KVGetMsg(streams.BucketBatches, streams.BatchKey(id)))
		if err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", id, err)
		}
		gets = append(gets, g)
	}
	var recs []*streams.BatchRecord
	for i, g := range gets {
		gets[i] = nil
		if _, err := g.Wait(ctx); err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", last-uint64(i), err)
		}
		data, _, err := streams.ReadKVGet(g.Msg())
		if errors.Is(err, streams.ErrNoValue) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", last-uint64(i), err)
		}
		rec, err := streams.Decode[streams.BatchRecord](data)
		if err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", last-uint64(i), err)
		}
		recs = append(recs, &rec)
	}
	return recs, nil
}

func summary(rec *streams.BatchRecord) BatchSummary {
	b := &rec.Batch
	out := BatchSummary{ID: b.ID, Label: b.Label, Domain: b.Domain, Priority: b.Priority, Status: rec.Status,
		Attempts: rec.Attempts, Functions: len(b.Functions), DeadLetter: rec.DeadLetter, ReplayOf: b.ReplayOf,
		ReplayedAs: rec.ReplayedAs, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Outcome != nil {
		out.Outcome = rec.Outcome.String()
	}
	return out
}

// CancelReply names the cancelled batch.
type CancelReply struct {
	ID     uint64          `json:"id"`
	Status pipeline.Status `json:"status"`
}

// cancel finishes one of the caller's batches as RemovedByOwner wherever it
// stands, as the owner's evict does (see Removal), its tokens found by a
// scan of its queue. Batches that are not the caller's answer 404, as
// batches that do not exist do; the owner may cancel any. A repeated
// cancel answers as the first did, and finishes a removal cut short (its
// callback never published, say): nothing else would, for a batch without
// a token, such as one waiting behind its key's head.
func (s *Service) cancel(ctx context.Context, user string, req *IDRequest) (any, error) {
	rec, err := s.recordFor(ctx, req.ID, errf(CodeNotFound, "authz: no batch %d of yours", req.ID), func(b *pipeline.Batch) bool {
		return user == b.Submitter || user == s.opts.Owner
	})
	if err != nil {
		return nil, err
	}
	b := &rec.Batch
	done := &CancelReply{ID: b.ID, Status: pipeline.RemovedByOwner}
	if rec.Status == pipeline.RemovedByOwner {
		return done, nil
	}
	if rec.Status.Terminal() {
		return nil, errf(CodeConflict, "authz: batch %d is already %s", req.ID, rec.Status)
	}
	finished := errf(CodeConflict, "authz: batch %d finished before it could be cancelled", req.ID)
	for range 10 {
		st, err := s.progressStore.Load(ctx, b.Domain, b.ID)
		if err != nil {
			return nil, err
		}
		repeat := removed(st)
		if st.State == streams.Done && !repeat {
			return nil, finished
		}
		if !repeat {
			if err := refuseInclusionWait(b, &st.Progress, "cancelled"); err != nil {
				return nil, err
			}
			if err := s.markRemoved(ctx, b, st, "cancelled by "+user); errors.Is(err, streams.ErrConflict) {
				continue // a processor moved it meanwhile: look again
			} else if err != nil {
				return nil, err
			}
		}
		seqs, err := s.tokensOf(ctx, b)
		if err != nil {
			return nil, err
		}
		dup, err := s.retireRemoved(ctx, b, st, seqs)
		if err != nil {
			return nil, err
		}
		if dup && !repeat {
			// A processor finished it first, in a step that wrote no
			// progress record: its outcome stands.
			return nil, finished
		}
		if dup {
			// This removal's callback, or a processor's that finished the
			// batch before it: the record tells, once it is applied.
			if rec, err := s.record(ctx, b.ID); err == nil && rec.Status.Terminal() && rec.Status != pipeline.RemovedByOwner {
				return nil, errf(CodeConflict, "authz: batch %d is already %s", req.ID, rec.Status)
			}
		}
		s.log.Info("batch cancelled", "batch_id", b.ID, "domain", b.Domain, "by", user, "tokens", len(seqs), "repeat", repeat)
		return done, nil
	}
	return nil, errf(CodeConflict, "authz: batch %d kept changing; try again", req.ID)
}
