package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// A submitter's own batches: listed newest first through the submitter
// index (a batches-bucket key streams.SubmitterKey per batch, written as
// the batch is accepted), and cancelled by id.

// startIndex publishes the submitter index key of batch id without
// waiting for it, so that it overlaps the record's write; its PubAck is
// awaited with indexed (or given up with Forget).
func (s *Service) startIndex(user string, id uint64) (*streams.PendingAck, error) {
	pa, err := s.acks.Publish(&nats.Msg{Subject: indexSubject(user, id)})
	if err != nil {
		return nil, fmt.Errorf("authz: index the batch under its submitter: %w", err)
	}
	return pa, nil
}

// indexed waits until the index key pa writes is stored.
func indexed(ctx context.Context, pa *streams.PendingAck) error {
	if _, err := pa.Wait(ctx); err != nil {
		return fmt.Errorf("authz: index the batch under its submitter: %w", err)
	}
	return nil
}

// index writes the submitter index key of batch id and waits for it.
func (s *Service) index(ctx context.Context, user string, id uint64) error {
	pa, err := s.startIndex(user, id)
	if err != nil {
		return err
	}
	return indexed(ctx, pa)
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
	// listReadsPerItem bounds the records a filtered page reads, per item
	// asked for: past it the page comes back short, with Next to go on.
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
// with the caller's batches, not with everyone's), then the records of the
// page, at most listReadsPerItem per item asked for when a status filters.
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
	ids, err := s.submitted(ctx, who, req.Before)
	if err != nil {
		return nil, err
	}
	out := &ListReply{Items: []BatchSummary{}}
	reads := 0
	for i, id := range ids {
		if len(out.Items) == req.Limit || reads == req.Limit*listReadsPerItem {
			if i > 0 {
				out.Next = ids[i-1]
			}
			break
		}
		reads++
		rec, err := s.record(ctx, id)
		var ae *Error
		if errors.As(err, &ae) && ae.Code == CodeNotFound {
			continue // indexed, then refused before it was recorded
		}
		if err != nil {
			return nil, err
		}
		if rec.Batch.Submitter != who || (req.Status != "" && rec.Status != req.Status) {
			continue
		}
		out.Items = append(out.Items, summary(rec))
	}
	return out, nil
}

// submitted returns the ids of user's batches below before (0: all),
// newest first.
func (s *Service) submitted(ctx context.Context, user string, before uint64) ([]uint64, error) {
	keys, err := s.batches.ListKeysFiltered(ctx, streams.SubmitterFilter(user))
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("authz: list the batches of %s: %w", user, err)
	}
	defer func() { _ = keys.Stop() }()
	var ids []uint64
	for k := range keys.Keys() {
		if id, ok := streams.ParseSubmitterKey(k); ok && (before == 0 || id < before) {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b uint64) int { return cmpID(b, a) })
	return ids, nil
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
