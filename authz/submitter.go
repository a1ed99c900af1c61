package authz

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// A submitter's own batches: listed newest first through the submitter
// index (streams.StreamSubmitted: a subject per submitter whose entries
// name their batches in the order accepted, each written before its
// batches are answered), and cancelled by id.

// submitterIndex keeps the submitter index: it appends this replica's
// submissions to it, and lists a submitter's batches from it.
type submitterIndex struct {
	acks    *jsapi.AckPublisher
	batches jetstream.KeyValue
	now     func() time.Time
	owner   string
	// marks appends this replica's submissions.
	marks indexMarks
}

// indexMarks appends this replica's submissions to the submitter index: a
// submitter's batches accepted while their previous entry is being written
// share the next entry (at most records.SubmittedGroup), so a busy
// submitter costs far fewer writes than batches, and a sparse one one
// write per batch. Per submitter it keeps the entries waiting and, between
// writes, the subject's last entry as this replica knows it (its sequence,
// the compare-and-set of the next write, and the sequences it names): a
// write that finds another replica's entry last reads the last entry and
// tries again. Bounded: past maxIndexUsers, submitters with nothing being
// written are forgotten (their last entry is read again when needed).
type indexMarks struct {
	mu    sync.Mutex
	users map[string]*indexLog
}

// indexLog is one submitter's appends. tail and known are the flusher's
// alone (one at a time, handed on under indexMarks.mu).
type indexLog struct {
	waiting  []*indexWrite // oldest first; only the last takes more ids
	flushing bool
	known    bool
	tail     indexTail
	// contended is until when the tail is read before each write: another
	// replica appended meanwhile, and trusting the tail of one's own last
	// write would win every race against a replica that must read it
	// first, and starve it.
	contended time.Time
}

// indexTail is the last entry of a submitter's subject: seq 0 for none.
type indexTail struct {
	seq  uint64
	back []uint64
}

// indexWrite is one entry's write: done is closed once it is stored (err
// nil) or given up.
type indexWrite struct {
	ids  []uint64
	done chan struct{}
	err  error
}

const (
	// maxIndexUsers bounds the submitters indexMarks keeps.
	maxIndexUsers = 4096
	// indexAttempts bounds the tries of one entry's write: each lost race
	// to another replica, or failed publish, costs one.
	indexAttempts = 50
	// indexContention is how long a replica that lost a race reads the
	// tail before each write.
	indexContention = time.Second
)

// startIndex adds batch id to user's next index entry, without waiting
// for it to be written, so that the write overlaps the record's; wait with
// indexed.
func (si *submitterIndex) startIndex(user string, id uint64) (*indexWrite, error) {
	m := &si.marks
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.users == nil {
		m.users = make(map[string]*indexLog)
	}
	l := m.users[user]
	if l == nil {
		if len(m.users) >= maxIndexUsers {
			for u, l := range m.users {
				if !l.flushing {
					delete(m.users, u)
				}
			}
		}
		l = &indexLog{}
		m.users[user] = l
	}
	var w *indexWrite
	if n := len(l.waiting); n > 0 && len(l.waiting[n-1].ids) < records.SubmittedGroup {
		w = l.waiting[n-1]
	} else {
		w = &indexWrite{done: make(chan struct{})}
		l.waiting = append(l.waiting, w)
	}
	w.ids = append(w.ids, id)
	if !l.flushing {
		l.flushing = true
		go si.flushIndex(user, l)
	}
	return w, nil
}

// flushIndex writes user's waiting entries, one after another, until none
// waits. Each write is bounded (indexAttempts tries, each bounded by the
// publisher's timeout), so it ends on its own.
func (si *submitterIndex) flushIndex(user string, l *indexLog) {
	m := &si.marks
	for {
		m.mu.Lock()
		if len(l.waiting) == 0 {
			l.flushing = false
			m.mu.Unlock()
			return
		}
		w := l.waiting[0]
		l.waiting = l.waiting[1:]
		m.mu.Unlock()
		w.err = si.appendIndex(user, l, w.ids)
		close(w.done)
	}
}

// appendIndex appends an entry of ids to user's subject, after the last
// one. A try that finds another entry last (another replica's) reads it
// and tries again; every try of one entry carries the same message id, so
// a try that was stored though its answer was lost is not stored twice:
// the server answers the next as a duplicate.
func (si *submitterIndex) appendIndex(user string, l *indexLog, ids []uint64) error {
	ctx := context.Background() // each wait is bounded by the publisher's timeout
	msgID := indexMsgID(user, ids)
	var last error
	for range indexAttempts {
		if !l.known || si.now().Before(l.contended) {
			tail, err := si.indexTail(ctx, user)
			if err != nil {
				last = err
				continue
			}
			l.tail, l.known = tail, true
		}
		e := records.SubmittedEntry{IDs: ids}
		if l.tail.seq != 0 {
			e.Back = append([]uint64{l.tail.seq}, l.tail.back[:min(len(l.tail.back), records.SubmittedBack-1)]...)
		}
		data, err := records.Encode(&e)
		if err != nil {
			return err
		}
		msg := nats.NewMsg(streams.SubmittedSubject(user))
		msg.Data = data
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(l.tail.seq, 10))
		msg.Header.Set(jetstream.MsgIDHeader, msgID)
		pa, err := si.acks.Publish(msg)
		if err != nil {
			return fmt.Errorf("authz: index the batch under its submitter: %w", err)
		}
		ack, err := pa.WaitPubAck(ctx)
		if err == nil {
			// A duplicate was stored by an earlier try, before the entry
			// now last: read that one before the next write.
			l.tail, l.known = indexTail{seq: ack.Seq, back: e.Back}, !ack.Duplicate
			return nil
		}
		last, l.known = err, false
		if isWrongLastSeq(err) {
			// Another replica's entry came first: read it, after a random
			// moment, so that racing replicas take turns.
			l.contended = si.now().Add(indexContention)
			time.Sleep(time.Duration(rand.Int64N(int64(time.Millisecond))))
		}
	}
	return fmt.Errorf("authz: index the batch under its submitter: %d tries: %w", indexAttempts, last)
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// indexMsgID names an entry's write, the same for each of its tries.
func indexMsgID(user string, ids []uint64) string {
	h := sha256.New()
	h.Write([]byte(user))
	for _, id := range ids {
		_ = binary.Write(h, binary.BigEndian, id)
	}
	return "ix-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// indexTail reads the last entry of user's subject.
func (si *submitterIndex) indexTail(ctx context.Context, user string) (indexTail, error) {
	g, err := si.acks.Request(streams.SubmittedLastMsg(user))
	if err != nil {
		return indexTail{}, err
	}
	seq, e, err := readEntry(ctx, g, user)
	if errors.Is(err, jsapi.ErrNoValue) {
		return indexTail{}, nil
	}
	if err != nil {
		return indexTail{}, err
	}
	return indexTail{seq: seq, back: e.Back}, nil
}

// readEntry reads the answer to a direct get of an index entry, which must
// be of user's subject: an entry of another's is no entry (ErrNoValue), as
// a missing one is.
func readEntry(ctx context.Context, g *jsapi.PendingAck, user string) (uint64, *records.SubmittedEntry, error) {
	if _, err := g.Wait(ctx); err != nil {
		return 0, nil, fmt.Errorf("authz: read the submitter index: %w", err)
	}
	m := g.Msg()
	data, seq, err := jsapi.ReadDirectGet(m)
	if err != nil {
		return 0, nil, err
	}
	if m.Header.Get(jetstream.SubjectHeader) != streams.SubmittedSubject(user) {
		return 0, nil, jsapi.ErrNoValue
	}
	e, err := records.Decode[records.SubmittedEntry](data)
	if err != nil {
		return 0, nil, fmt.Errorf("authz: read the submitter index: entry %d: %w", seq, err)
	}
	return seq, &e, nil
}

// indexed waits until the index entry of batch id is stored, by w (from
// startIndex).
func (si *submitterIndex) indexed(ctx context.Context, _ string, _ uint64, w *indexWrite) error {
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

// index writes the submitter index entry of batch id and waits for it.
func (si *submitterIndex) index(ctx context.Context, user string, id uint64) error {
	w, err := si.startIndex(user, id)
	if err != nil {
		return err
	}
	return si.indexed(ctx, user, id, w)
}

// listReadsPerItem bounds the batches a page looks at, per item asked
// for: past it the page comes back short, with Next to go on, so that a
// rare status cannot make one page read everything.
const listReadsPerItem = 4

var statuses = []pipeline.Status{pipeline.InProcess, pipeline.Executed, pipeline.Rejected,
	pipeline.PartiallyExecuted, pipeline.RemovedByOwner, pipeline.Expired}

// A cursor is a position in a listing: the index entry at stream
// sequence seq, of which the first rest ids are still to list (restAll:
// every one); or, with cursorLegacy set, a batch id of the index keys of
// earlier versions (their batches are listed after the index's, by id).
const (
	cursorLegacy = uint64(1) << 63
	restAll      = 0xff
)

func entryCursor(seq uint64, rest int) uint64 { return seq<<8 | uint64(rest) }

// listed is a batch id found in the index and the cursor just past it.
type listed struct {
	id, next uint64
}

// indexReader walks a submitter's index entries newest first, reading at
// most ahead entries at once: each names the sequences of the ones before
// it (records.SubmittedBack), so they are read together.
type indexReader struct {
	acks  *jsapi.AckPublisher
	user  string
	ids   []listed // found, not yet taken, newest first
	older []uint64 // sequences of the entries before those read, newest first
	reads int      // entries read
}

// add takes entry e at seq, of which the first rest ids are to list.
func (r *indexReader) add(seq uint64, e *records.SubmittedEntry, rest int) {
	rest = min(rest, len(e.IDs))
	for i := rest - 1; i >= 0; i-- {
		next := entryCursor(seq, i)
		if i == 0 {
			next = 0
			if len(e.Back) > 0 {
				next = entryCursor(e.Back[0], restAll)
			}
		}
		r.ids = append(r.ids, listed{id: e.IDs[i], next: next})
	}
	r.older = e.Back
}

// fill reads entries until at least n ids are found or there are no more,
// at most n entries at once (each names one id at least).
func (r *indexReader) fill(ctx context.Context, n int) error {
	for len(r.ids) < n && len(r.older) > 0 {
		seqs := r.older[:min(len(r.older), n-len(r.ids))]
		r.older = nil
		gets := make([]*jsapi.PendingAck, 0, len(seqs))
		forget := func() {
			for _, g := range gets {
				g.Forget()
			}
		}
		for _, seq := range seqs {
			g, err := r.acks.Request(streams.SubmittedSeqMsg(seq))
			if err != nil {
				forget()
				return fmt.Errorf("authz: read the submitter index: %w", err)
			}
			gets = append(gets, g)
		}
		for i, g := range gets {
			r.reads++
			seq, e, err := readEntry(ctx, g, r.user)
			if errors.Is(err, jsapi.ErrNoValue) {
				// Gone (deleted by hand): the entries it named are out of
				// reach beyond those read with it.
				continue
			}
			if err != nil {
				gets = gets[i+1:]
				forget()
				return err
			}
			if seq != seqs[i] {
				continue
			}
			r.add(seq, e, restAll)
		}
	}
	return nil
}

// list answers a page of the caller's batches, newest first by the order
// they were accepted in. From its cursor it reads the caller's index
// entries and the records of the batches they name, the page's worth and
// no more: whatever the caller's history, a page reads at most
// listReadsPerItem records and as many entries per item asked for, plus
// one.
func (si *submitterIndex) list(ctx context.Context, user string, req *api.ListRequest) (any, error) {
	who := user
	if req.Submitter != "" && req.Submitter != user {
		if err := checkOwner(si.owner, user); err != nil {
			return nil, errf(api.CodeForbidden, "authz: only the owner may list another user's batches (you are %q)", user)
		}
		if err := pipeline.ValidateDomain(req.Submitter); err != nil {
			return nil, errf(api.CodeBadRequest, "authz: submitter %q: expected a user name without '.', '*', '>' or spaces", logging.Capped(req.Submitter))
		}
		who = req.Submitter
	}
	if req.Status != "" && !slices.Contains(statuses, req.Status) {
		return nil, errf(api.CodeBadRequest, "authz: status %q: expected one of %v, or none for all", logging.Capped(string(req.Status)), statuses)
	}
	var err error
	if req.Limit, err = pageLimit(req.Limit, api.DefaultListLimit, api.MaxListLimit); err != nil {
		return nil, err
	}
	if req.Before&cursorLegacy != 0 {
		return si.listLegacy(ctx, who, req, req.Before&^cursorLegacy)
	}
	r := &indexReader{acks: si.acks, user: who}
	badCursor := errf(api.CodeBadRequest, "authz: before %d is not a cursor of this listing: pass the previous page's next as it was, or none for the newest", req.Before)
	if req.Before == 0 {
		g, err := si.acks.Request(streams.SubmittedLastMsg(who))
		if err != nil {
			return nil, fmt.Errorf("authz: read the submitter index: %w", err)
		}
		r.reads++
		switch seq, e, err := readEntry(ctx, g, who); {
		case errors.Is(err, jsapi.ErrNoValue):
		case err != nil:
			return nil, err
		default:
			r.add(seq, e, restAll)
		}
	} else {
		seq, rest := req.Before>>8, int(req.Before&0xff)
		if seq == 0 || rest == 0 || (rest > records.SubmittedGroup && rest != restAll) {
			return nil, badCursor
		}
		r.older = []uint64{seq}
		if err := r.fill(ctx, 1); err != nil {
			return nil, err
		}
		if len(r.ids) == 0 {
			return nil, badCursor // no entry of the caller's there
		}
		// fill took the whole entry: keep its first rest ids.
		if rest != restAll {
			if drop := len(r.ids) - rest; drop > 0 {
				r.ids = r.ids[drop:]
			}
		}
	}
	out := &api.ListReply{Items: []api.BatchSummary{}}
	seen := map[uint64]bool{}
	budget := req.Limit * listReadsPerItem
	var next uint64 // the cursor past the last batch looked at
	for len(out.Items) < req.Limit && budget > 0 {
		want := min(req.Limit-len(out.Items), budget)
		if err := r.fill(ctx, want); err != nil {
			return nil, err
		}
		if len(r.ids) == 0 {
			break
		}
		chunk := r.ids[:min(want, len(r.ids))]
		r.ids = r.ids[len(chunk):]
		budget -= len(chunk)
		recs, err := si.readRecords(ctx, chunk)
		if err != nil {
			return nil, err
		}
		for i, rec := range recs {
			next = chunk[i].next
			if rec == nil || seen[rec.Batch.ID] || rec.Batch.Submitter != who || (req.Status != "" && rec.Status != req.Status) {
				continue // not recorded (refused), listed already, another's, or not the status asked for
			}
			seen[rec.Batch.ID] = true
			out.Items = append(out.Items, si.summary(rec))
			if len(out.Items) == req.Limit {
				break
			}
		}
	}
	if len(out.Items) == req.Limit || budget == 0 {
		out.Next = next
	}
	if out.Next == 0 {
		// The index is read to its start: the batches indexed by earlier
		// versions, if any, come after.
		legacy, err := si.hasLegacyIndex(ctx, who)
		if err != nil {
			return nil, err
		}
		if legacy {
			out.Next = cursorLegacy
		}
	}
	return out, nil
}

// readRecords reads the records of the batches listed, with one pipelined
// direct get each: nil for an id without a record (refused before its
// record was written).
func (si *submitterIndex) readRecords(ctx context.Context, ids []listed) ([]*records.BatchRecord, error) {
	gets := make([]*jsapi.PendingAck, 0, len(ids))
	defer func() {
		for _, g := range gets {
			if g != nil {
				g.Forget()
			}
		}
	}()
	for _, it := range ids {
		g, err := si.acks.Request(jsapi.KVGetMsg(streams.BucketBatches, streams.BatchKey(it.id)))
		if err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", it.id, err)
		}
		gets = append(gets, g)
	}
	recs := make([]*records.BatchRecord, len(ids))
	for i, g := range gets {
		gets[i] = nil
		if _, err := g.Wait(ctx); err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", ids[i].id, err)
		}
		data, _, err := jsapi.ReadKVGet(g.Msg())
		if errors.Is(err, jsapi.ErrNoValue) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", ids[i].id, err)
		}
		rec, err := records.Decode[records.BatchRecord](data)
		if err != nil {
			return nil, fmt.Errorf("authz: read batch %d: %w", ids[i].id, err)
		}
		recs[i] = &rec
	}
	return recs, nil
}

// hasLegacyIndex says whether user has index keys of earlier versions
// (streams.SubmitterKey): one direct get of the last of them.
func (si *submitterIndex) hasLegacyIndex(ctx context.Context, user string) (bool, error) {
	m := nats.NewMsg("$JS.API.DIRECT.GET.KV_" + streams.BucketBatches)
	m.Data = []byte(`{"last_by_subj":"$KV.` + streams.BucketBatches + "." + streams.SubmitterFilter(user) + `"}`)
	g, err := si.acks.Request(m)
	if err != nil {
		return false, fmt.Errorf("authz: look for index keys of earlier versions: %w", err)
	}
	if _, err := g.Wait(ctx); err != nil {
		return false, fmt.Errorf("authz: look for index keys of earlier versions: %w", err)
	}
	_, _, err = jsapi.ReadKVGet(g.Msg())
	if errors.Is(err, jsapi.ErrNoValue) {
		return false, nil
	}
	return err == nil, err
}

// listLegacy pages through the batches indexed by the keys of earlier
// versions, below id before (0: all), newest id first: their keys are
// listed whole, once per page; they are no longer written, so their number
// no longer grows.
func (si *submitterIndex) listLegacy(ctx context.Context, who string, req *api.ListRequest, before uint64) (any, error) {
	windows, err := si.submitted(ctx, who, before)
	if err != nil {
		return nil, err
	}
	out := &api.ListReply{Items: []api.BatchSummary{}}
	var seen uint64 // the smallest id looked at
	for i, w := range windows {
		if i == req.Limit*listReadsPerItem {
			out.Next = cursorLegacy | seen
			break
		}
		recs, err := si.windowRecords(ctx, w, before)
		if err != nil {
			return nil, err
		}
		for j, rec := range recs {
			if rec.Batch.Submitter != who || (req.Status != "" && rec.Status != req.Status) {
				continue
			}
			out.Items = append(out.Items, si.summary(rec))
			if len(out.Items) == req.Limit {
				if j < len(recs)-1 || i < len(windows)-1 {
					out.Next = cursorLegacy | rec.Batch.ID
				}
				return out, nil
			}
		}
		seen = w
	}
	return out, nil
}

// submitted returns the first ids of the windows of the index keys of
// earlier versions holding user's batches below before (0: all), newest
// first.
func (si *submitterIndex) submitted(ctx context.Context, user string, before uint64) ([]uint64, error) {
	keys, err := si.batches.ListKeysFiltered(ctx, streams.SubmitterFilter(user))
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
// newest first.
func (si *submitterIndex) windowRecords(ctx context.Context, w, before uint64) ([]*records.BatchRecord, error) {
	last := w + streams.SubmitterWindow - 1
	if before != 0 && last >= before {
		last = before - 1
	}
	var ids []listed
	for id := last; id >= w && id != 0; id-- {
		ids = append(ids, listed{id: id})
	}
	recs, err := si.readRecords(ctx, ids)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(recs, func(r *records.BatchRecord) bool { return r == nil }), nil
}

func (si *submitterIndex) summary(rec *records.BatchRecord) api.BatchSummary {
	out := summary(rec)
	out.Scheduled = rec.Status == pipeline.InProcess && rec.Batch.Scheduled(si.now())
	return out
}

func summary(rec *records.BatchRecord) api.BatchSummary {
	b := &rec.Batch
	out := api.BatchSummary{ID: b.ID, Label: b.Label, Domain: b.Domain, Priority: b.Priority, Status: rec.Status,
		Attempts: rec.Attempts, Functions: len(b.Functions), DeadLetter: rec.DeadLetter, ReplayOf: b.ReplayOf,
		ReplayedAs: rec.ReplayedAs, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt, RunAt: b.RunAt}
	if rec.Outcome != nil {
		out.Outcome = rec.Outcome.String()
	}
	return out
}
