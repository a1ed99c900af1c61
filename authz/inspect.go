package authz

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// The owner's views of what runs now: every domain's queues and pause
// state (domains), and the batches of one domain not finished yet, oldest
// first (inflight).

// inspector answers the owner's views of what runs now, and scans a
// queue's live tokens for them and for the queue edits.
type inspector struct {
	dlq       jetstream.Stream
	locks     jetstream.KeyValue
	state     jetstream.KeyValue
	queues    map[pipeline.Priority]jetstream.Stream
	progress  *streams.ProgressStore
	store     *recordStore
	scheduled *scheduledBatches
	table     func() *Table
	now       func() time.Time
}

// domains answers every domain the table names, sorted: two stream reads
// per domain and priority, whatever the queues hold.
func (ins *inspector) domains(ctx context.Context, _ string, _ *struct{}) (any, error) {
	var names []string
	for _, l := range ins.table().Labels {
		if !slices.Contains(names, l.Domain) {
			names = append(names, l.Domain)
		}
	}
	slices.Sort(names)
	dlq, err := subjectCounts(ctx, ins.dlq, streams.DLQSubjects)
	if err != nil {
		return nil, err
	}
	out := &api.DomainsReply{Domains: []api.DomainInfo{}}
	for _, d := range names {
		info := api.DomainInfo{Domain: d, Depth: map[pipeline.Priority]uint64{pipeline.High: 0, pipeline.Med: 0}, DeadLetters: dlq[streams.DLQSubject(d)]}
		e, err := ins.state.Get(ctx, d)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, fmt.Errorf("authz: pause state of %s: %w", d, err)
		default:
			if st, err := records.DecodeDomainState(e.Value()); err == nil {
				info.Paused, info.PausedBy, info.At = st.Paused, st.By, st.At
			}
		}
		switch w, ok, err := streams.NewThrottleStore(ins.locks, ins.now).Window(ctx, d); {
		case errors.Is(err, records.ErrDecode):
			// Read as none, as a pause state that does not decode: the
			// processors' next take writes the window anew.
		case err != nil:
			return nil, fmt.Errorf("authz: throttle of %s: %w", d, err)
		case ok:
			tw := api.ThrottleWindow(w)
			info.Throttle = &tw
		}
		for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
			counts, err := subjectCounts(ctx, ins.queues[p], streams.QueueFilter(p, d))
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

// maxInFlightScan bounds the tokens one listing reads per priority: past
// it the reply has More and no Total (api.InFlightRequest.Total).
const maxInFlightScan = 10000

// inflight lists the batches that have a live token, of both priorities:
// the batches a processor has not finished. A batch id is its acceptance
// order (ids come from one log), so oldest first is by id. Without Total
// each queue is read only until Limit+1 of its batches are found: the
// answer is then the oldest of the batches at the queues' fronts (a batch
// rotated behind them can be left out), and the one past Limit says there
// are More.
func (ins *inspector) inflight(ctx context.Context, _ string, req *api.InFlightRequest) (any, error) {
	if err := pipeline.ValidateDomain(req.Domain); err != nil {
		return nil, err
	}
	var err error
	if req.Limit, err = pageLimit(req.Limit, api.DefaultInFlight, api.MaxInFlight); err != nil {
		return nil, err
	}
	type found struct {
		item api.InFlightItem
		tok  records.Token
		prog *streams.ProgressEntry
	}
	var all []found
	truncated := false
	for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		n := 0
		cut, err := ins.scanQueueWhile(ctx, req.Domain, p, maxInFlightScan, func(it api.QueueItem, tok records.Token, pr *streams.ProgressEntry) bool {
			all = append(all, found{item: api.InFlightItem{ID: it.ID, Priority: p, Position: it.Position, State: it.State, Rotations: it.Rotation}, tok: tok, prog: pr})
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
		sched, cut, err := ins.scheduled.list(ctx, req.Domain, p, most)
		if err != nil {
			return nil, err
		}
		truncated = truncated || cut
		for _, it := range sched {
			all = append(all, found{item: api.InFlightItem{ID: it.ID, Priority: p, Position: it.Position, State: it.State, RunAt: it.RunAt},
				prog: &streams.ProgressEntry{}})
		}
	}
	slices.SortFunc(all, func(a, b found) int { return cmpID(a.item.ID, b.item.ID) })
	out := &api.InFlightReply{Domain: req.Domain, Items: []api.InFlightItem{}, More: truncated || len(all) > req.Limit}
	if req.Total && !truncated {
		n := len(all)
		out.Total = &n
	}
	now := ins.now()
	for _, f := range all[:min(len(all), req.Limit)] {
		b := f.tok.Batch
		if b == nil || b.ID != f.item.ID {
			rec, err := ins.store.record(ctx, f.item.ID)
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
		it.NotBefore, it.LastError, it.Waiting = pr.NotBefore, pr.LastError, apiWaiting(pr.Waiting)
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
func (ins *inspector) scanQueue(ctx context.Context, domain string, p pipeline.Priority, max int, visit func(api.QueueItem, records.Token, *streams.ProgressEntry)) (truncated bool, err error) {
	return ins.scanQueueWhile(ctx, domain, p, max, func(it api.QueueItem, tok records.Token, pr *streams.ProgressEntry) bool {
		visit(it, tok, pr)
		return true
	})
}

// scanQueueWhile is scanQueue that also stops, reading nothing more, when
// visit returns false; that stop is not a truncation.
func (ins *inspector) scanQueueWhile(ctx context.Context, domain string, p pipeline.Priority, max int, visit func(api.QueueItem, records.Token, *streams.ProgressEntry) bool) (truncated bool, err error) {
	st := ins.queues[p]
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
		tok, err := records.Decode[records.Token](rm.Data)
		if err != nil {
			continue // garbage is the processor's to dead-letter
		}
		pr, ok := progress[tok.BatchID]
		if !ok {
			if pr, err = ins.progress.Load(ctx, domain, tok.BatchID); err != nil {
				return false, err
			}
			progress[tok.BatchID] = pr
		}
		if !pr.Live(tok) {
			continue
		}
		more := visit(api.QueueItem{Position: position, ID: tok.BatchID, Seq: rm.Sequence, Subject: rm.Subject,
			Gen: tok.Gen, Rotation: tok.Rotation, State: api.State(pr.State), Key: tokenKey(tok)}, tok, pr)
		if !more {
			return false, nil
		}
		position++
	}
}
