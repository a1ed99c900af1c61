package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// The owner's views of what runs now: every domain's queues and pause
// state (domains), and the batches of one domain not finished yet, oldest
// first (inflight).

// DomainsReply lists the domains of the authorization table.
type DomainsReply struct {
	Domains []DomainInfo `json:"domains"`
}

// DomainInfo is one domain's pause state and queue depths.
type DomainInfo struct {
	Domain string `json:"domain"`
	Paused bool   `json:"paused"`
	// PausedBy and At say who changed the state last, and when.
	PausedBy string    `json:"by,omitempty"`
	At       time.Time `json:"at,omitzero"`
	// Depth counts the tokens of each priority's queue: the batches waiting
	// for their turn, those a processor holds (running, waiting on a retry
	// delay or a confirmation), and tokens a processor has not dropped yet
	// since their batch moved on. The queue operation lists the live ones.
	Depth map[pipeline.Priority]uint64 `json:"depth"`
	// DeadLetters counts the domain's dead letters kept.
	DeadLetters uint64 `json:"dead_letters"`
	// Throttle, when the domain's processors are throttled, is the last
	// second's budget they drew from: the steps per second allowed, the
	// second (Unix time) and the steps taken in it.
	Throttle *streams.ThrottleWindow `json:"throttle,omitempty"`
}

// domains answers every domain the table names, sorted: two stream reads
// per domain and priority, whatever the queues hold.
func (s *Service) domains(ctx context.Context, _ string, _ *struct{}) (any, error) {
	var names []string
	for _, l := range s.Table().Labels {
		if !slices.Contains(names, l.Domain) {
			names = append(names, l.Domain)
		}
	}
	slices.Sort(names)
	dlq, err := subjectCounts(ctx, s.dlq, streams.DLQSubjects)
	if err != nil {
		return nil, err
	}
	out := &DomainsReply{Domains: []DomainInfo{}}
	for _, d := range names {
		info := DomainInfo{Domain: d, Depth: map[pipeline.Priority]uint64{pipeline.High: 0, pipeline.Med: 0}, DeadLetters: dlq[streams.DLQSubject(d)]}
		e, err := s.state.Get(ctx, d)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, fmt.Errorf("authz: pause state of %s: %w", d, err)
		default:
			if st, err := streams.DecodeDomainState(e.Value()); err == nil {
				info.Paused, info.PausedBy, info.At = st.Paused, st.By, st.At
			}
		}
		if w, ok, err := streams.NewThrottleStore(s.locks, time.Now).Window(ctx, d); err != nil {
			return nil, fmt.Errorf("authz: throttle of %s: %w", d, err)
		} else if ok {
			info.Throttle = &w
		}
		for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
			counts, err := subjectCounts(ctx, s.queues[p], streams.QueueFilter(p, d))
			if err != nil {
				return nil, err
			}
			for _, n := range counts {
				info.Depth[p] += n
			}
		}
		out.Domains = append(out.Domains, info)
	}
	return out, nil
}

// subjectCounts returns the messages per subject of st matching filter.
func subjectCounts(ctx context.Context, st jetstream.Stream, filter string) (map[string]uint64, error) {
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("authz: count %s: %w", filter, err)
	}
	return info.State.Subjects, nil
}

// InFlightRequest lists a domain's unfinished batches, oldest first.
type InFlightRequest struct {
	Domain string `json:"domain"`
	// Limit bounds the items answered: 1 to MaxInFlight, 0 for
	// DefaultInFlight.
	Limit int `json:"limit,omitempty"`
	// Total asks for the count of the domain's unfinished batches, and for
	// the Limit oldest of them all: both queues are then read to their end
	// (at most maxInFlightScan tokens each). Without it each queue is read
	// from its front only until Limit+1 of its batches are found, so a
	// listing costs about 2×Limit reads however deep the queues are.
	Total bool `json:"total,omitempty"`
}

// Bounds of an in-flight listing.
const (
	// DefaultInFlight is the items an InFlightRequest without a limit gets.
	DefaultInFlight = 100
	// MaxInFlight is the largest limit of an InFlightRequest.
	MaxInFlight = 1000
	// maxInFlightScan bounds the tokens one listing reads per priority:
	// past it the reply has More and no Total.
	maxInFlightScan = 10000
)

// InFlightItem is one unfinished batch: where it stands and who moved it
// last.
type InFlightItem struct {
	ID        uint64            `json:"id"`
	Label     string            `json:"label"`
	Submitter string            `json:"submitter"`
	Priority  pipeline.Priority `json:"priority"`
	// Position is the batch's place in its queue; for a scheduled batch,
	// its place among the queue's scheduled batches (QueueReply.Scheduled).
	Position int `json:"position"`
	// State is queued (waiting, running or waiting on a retry delay),
	// parked (waiting for a confirmation) or scheduled (waiting for its
	// RunAt, not in the queue yet).
	State streams.State `json:"state"`
	// RunAt is when a scheduled batch runs.
	RunAt time.Time `json:"run_at,omitzero"`
	// Next is the function that runs next, of Functions.
	Next      int `json:"next"`
	Functions int `json:"functions"`
	// Rotations counts the batch's trips to the back of its queue.
	Rotations uint32 `json:"rotations"`
	Attempts  int    `json:"attempts"`
	// Holder is the processor replica that moved the batch last (wrote its
	// progress), Since when; empty while no processor has moved it, and
	// Since is then when it was accepted.
	Holder    string    `json:"holder,omitempty"`
	Since     time.Time `json:"since"`
	CreatedAt time.Time `json:"created_at"`
	// AgeMS is the time since the batch was accepted, in milliseconds.
	AgeMS int64 `json:"age_ms"`
	// NotBefore is when a batch waiting on a retry delay runs again.
	NotBefore time.Time `json:"not_before,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// Waiting says why no worker attempts the batch's next call, and
	// since when (e.g. no worker serves its function type).
	Waiting *streams.Waiting `json:"waiting,omitempty"`
}

// InFlightReply lists a domain's unfinished batches, oldest first.
type InFlightReply struct {
	Domain string         `json:"domain"`
	Items  []InFlightItem `json:"items"`
	// Total counts the domain's unfinished batches: set only when the
	// request asked for it and both queues were read to their end.
	Total *int `json:"total,omitempty"`
	// More says the domain has unfinished batches beyond Items: at least
	// one more was found, or a queue held more tokens than one listing
	// reads. Without More, Items are all of them.
	More bool `json:"more,omitempty"`
}

// inflight lists the batches that have a live token, of both priorities:
// the batches a processor has not finished. A batch id is its acceptance
// order (ids come from one log), so oldest first is by id. Without Total
// each queue is read only until Limit+1 of its batches are found: the
// answer is then the oldest of the batches at the queues' fronts (a batch
// rotated behind them can be left out), and the one past Limit says there
// are More.
func (s *Service) inflight(ctx context.Context, _ string, req *InFlightRequest) (any, error) {
	if err := pipeline.ValidateDomain(req.Domain); err != nil {
		return nil, err
	}
	var err error
	if req.Limit, err = pageLimit(req.Limit, DefaultInFlight, MaxInFlight); err != nil {
		return nil, err
	}
	type found struct {
		item InFlightItem
		tok  streams.Token
		prog *streams.ProgressEntry
	}
	var all []found
	truncated := false
	for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		n := 0
		cut, err := s.scanQueueWhile(ctx, req.Domain, p, maxInFlightScan, func(it QueueItem, tok streams.Token, pr *streams.ProgressEntry) bool {
			all = append(all, found{item: InFlightItem{ID: it.ID, Priority: p, Position: it.Position, State: it.State, Rotations: it.Rotation}, tok: tok, prog: pr})
			n++
			return req.Total || n <= req.Limit
		})
		if err != nil {
			return nil, err
		}
		truncated = truncated || cut
		// The schedules in the order sent, as far as the listing needs.
		most := maxInFlightScan
		if !req.Total {
			most = req.Limit + 1
		}
		sched, cut, err := s.Schedules(ctx, req.Domain, p, most)
		if err != nil {
			return nil, err
		}
		truncated = truncated || cut
		for _, it := range sched {
			all = append(all, found{item: InFlightItem{ID: it.ID, Priority: p, Position: it.Position, State: it.State, RunAt: it.RunAt},
				prog: &streams.ProgressEntry{}})
		}
	}
	slices.SortFunc(all, func(a, b found) int { return cmpID(a.item.ID, b.item.ID) })
	out := &InFlightReply{Domain: req.Domain, Items: []InFlightItem{}, More: truncated || len(all) > req.Limit}
	if req.Total && !truncated {
		n := len(all)
		out.Total = &n
	}
	now := s.opts.Now()
	for _, f := range all[:min(len(all), req.Limit)] {
		b := f.tok.Batch
		if b == nil || b.ID != f.item.ID {
			rec, err := s.record(ctx, f.item.ID)
			if err != nil {
				continue // finished and gone meanwhile, or unreadable: the processor's to settle
			}
			b = &rec.Batch
		}
		it, pr := f.item, f.prog
		it.Label, it.Submitter, it.Functions, it.CreatedAt = b.Label, b.Submitter, len(b.Functions), b.CreatedAt
		it.AgeMS = now.Sub(b.CreatedAt).Milliseconds()
		it.Next, it.Attempts = pr.Next, pr.Attempts(b.Subroutine.Mode == pipeline.Atomic)
		it.Since, it.Holder = b.CreatedAt, pr.By
		if pr.Rev != 0 {
			it.Since = pr.UpdatedAt
		}
		it.NotBefore, it.LastError, it.Waiting = pr.NotBefore, pr.LastError, pr.Waiting
		out.Items = append(out.Items, it)
	}
	return out, nil
}

func cmpID(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// scanQueue calls visit with each live token of a domain's queue of one
// priority, in order, with its progress; it stops after max tokens (0: no
// bound) and says so. One direct get per token and one progress read per
// batch.
func (s *Service) scanQueue(ctx context.Context, domain string, p pipeline.Priority, max int, visit func(QueueItem, streams.Token, *streams.ProgressEntry)) (truncated bool, err error) {
	return s.scanQueueWhile(ctx, domain, p, max, func(it QueueItem, tok streams.Token, pr *streams.ProgressEntry) bool {
		visit(it, tok, pr)
		return true
	})
}

// scanQueueWhile is scanQueue that also stops, reading nothing more, when
// visit returns false; that stop is not a truncation.
func (s *Service) scanQueueWhile(ctx context.Context, domain string, p pipeline.Priority, max int, visit func(QueueItem, streams.Token, *streams.ProgressEntry) bool) (truncated bool, err error) {
	st := s.queues[p]
	filter := streams.QueueFilter(p, domain)
	progress := map[uint64]*streams.ProgressEntry{}
	position, read := 0, 0
	for seq := uint64(1); ; read++ {
		if max > 0 && read == max {
			return true, nil
		}
		rm, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("authz: read queue %s of %s: %w", p, domain, err)
		}
		seq = rm.Sequence + 1
		tok, err := streams.Decode[streams.Token](rm.Data)
		if err != nil {
			continue // garbage is the processor's to dead-letter
		}
		pr, ok := progress[tok.BatchID]
		if !ok {
			if pr, err = s.progressStore.Load(ctx, domain, tok.BatchID); err != nil {
				return false, err
			}
			progress[tok.BatchID] = pr
		}
		if !pr.Live(tok) {
			continue
		}
		more := visit(QueueItem{Position: position, ID: tok.BatchID, Seq: rm.Sequence, Subject: rm.Subject,
			Gen: tok.Gen, Rotation: tok.Rotation, State: pr.State, Key: tokenKey(tok)}, tok, pr)
		if !more {
			return false, nil
		}
		position++
	}
}
