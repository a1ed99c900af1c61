package authz

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// endpoints is the API: every operation, whether only the owner may call
// it, and its handler, which receives the request decoded (decodeJSON)
// after the owner check.
func (s *Service) endpoints() []endpoint {
	const owner = true
	return []endpoint{
		{api.OpSend, "submit a batch under an authorization label", !owner, s.sendBody},
		{api.OpBatch, "the record of one batch", !owner, op(s.batch)},
		{api.OpConfirm, "confirm a function waiting for a confirmation", !owner, op(s.confirm)},
		{api.OpQueue, "a domain's queue in order, [from, to)", owner, op(s.queueEdits.queue)},
		{api.OpPause, "pause a domain's processors", owner, op(s.pause)},
		{api.OpResume, "resume a domain's processors", owner, op(s.resume)},
		{api.OpEvict, "remove the batch at a position", owner, op(s.queueEdits.evict)},
		{api.OpInsert, "insert a batch at a position", owner, op(s.queueEdits.insert)},
		{api.OpDLQ, "list dead letters", owner, op(s.deadLetters.list)},
		{api.OpReplay, "replay dead letters as new batches", owner, op(s.deadLetters.replay)},
		{api.OpPurge, "remove dead letters: one, a domain's, or those older than a duration", owner, op(s.deadLetters.purge)},
		{api.OpReload, "reload the authorization table", owner, op(s.reload)},
		{api.OpKeys, "a domain's keys: each one's running batch and how many wait", owner, op(s.keyOrders.list)},
		{api.OpSenders, "a domain's senders, free or leased", owner, op(s.senderPool.list)},
		{api.OpDomains, "every domain's queue depths, dead letters and pause state", owner, op(s.inspect.domains)},
		{api.OpInFlight, "a domain's unfinished batches, oldest first", owner, op(s.inspect.inflight)},
		{api.OpPresence, "the running processors and workers, and what nothing running serves", owner, op(s.presence.list)},
		{api.OpList, "your own batches, newest first, paged", !owner, op(s.submitters.list)},
		{api.OpCancel, "cancel one of your own batches", !owner, op(s.removal.cancel)},
		{api.OpSchedules, "the table's schedules: last period fired, next, pause state", owner, op(s.sched.listSchedules)},
		{api.OpPauseSchedule, "pause a schedule for every replica", owner, op(s.sched.pauseSchedule)},
		{api.OpResumeSchedule, "resume a schedule: its latest missed period fires", owner, op(s.sched.resumeSchedule)},
	}
}

// sendBody is op(s.send) with the send request's own decoder (decodeSend).
func (s *Service) sendBody(ctx context.Context, user string, body []byte) (any, error) {
	var req api.SendRequest
	if err := decodeSend(body, &req); err != nil {
		return nil, err
	}
	return s.send(ctx, user, &req)
}

func (s *Service) send(ctx context.Context, user string, req *api.SendRequest) (any, error) {
	t := s.Table()
	if lim := t.limits(user, 0); !s.rates.allow(user, lim, s.opts.Now()) {
		return nil, errf(api.CodeTooManyRequests, "authz: %s sends more than %v per second (send_rate %v, send_burst %d); try again", user, lim.sendRate, lim.sendRate, lim.sendBurst)
	}
	if strings.HasPrefix(req.IdempotencyKey, streams.ScheduleIdempotencyPrefix) {
		return nil, errf(api.CodeBadRequest, "authz: idempotency_key: keys starting with %q are the schedules' own; choose another", streams.ScheduleIdempotencyPrefix)
	}
	l, ok := t.Labels[req.Label]
	if !ok {
		return nil, errf(api.CodeNotFound, "authz: unknown label %q", logging.Capped(req.Label))
	}
	if !l.Allows(user) {
		return nil, errf(api.CodeForbidden, "authz: %q may not submit under label %q", user, req.Label)
	}
	if err := t.allowedTypes(l.Domain, req.Functions); err != nil {
		return nil, err
	}
	runAt, err := l.runAt(req.Label, req.RunAt, req.Delay, s.opts.Now())
	if err != nil {
		return nil, err
	}
	return s.submit(ctx, &submission{label: req.Label, l: l, user: user, calls: req.Functions, key: req.Key,
		idem: req.IdempotencyKey, prio: l.Priority, runAt: runAt})
}

// submission is what one submission asks for, once its caller is known to
// be allowed: send builds one from its request, and every other way of
// submitting a batch through the send path builds its own.
type submission struct {
	// label names l, the label the batch runs under.
	label string
	l     *Label
	// user is the submitter.
	user  string
	calls []api.CallSpec
	// key is the batch's serialisation key; idem its idempotency key.
	key, idem string
	prio      pipeline.Priority
	// force skips the label's concurrency limits and key bound (the
	// owner's insert).
	force bool
	// runAt, when set, schedules the batch: already checked against the
	// label's max_delay, and in the future when it was read.
	runAt time.Time
}

// submit builds, limits, records and queues a batch.
func (s *Service) submit(ctx context.Context, sub *submission) (*api.SendReply, error) {
	l := sub.l
	b, err := s.build(ctx, sub)
	if err != nil {
		return nil, err
	}
	// A repeated submission publishes the (deduplicated) first token again
	// only while the batch never ran (admit's repeat): the first may have
	// been cut short by a crash.
	if !b.dup || !b.terminal {
		bound := 0
		if !b.dup {
			bound = l.KeyBound()
		}
		if head, err := s.keyOrders.admit(ctx, b.batch, b.dup, bound); err != nil {
			if errors.Is(err, errJoinLater) {
				return nil, fmt.Errorf("authz: batch %d is recorded, but has not joined the order of its key yet (%w); authz adds it as soon as it can: send it again only with the same idempotency key", b.batch.ID, err)
			}
			if !head {
				return nil, err
			}
			// Recorded, and first in its key's order if it has one, but its
			// token not published: the repair loop publishes it (admit
			// handed it a key already).
			handed := !errors.Is(err, errNotHanded)
			if b.batch.Key == "" {
				handed = s.keyRepair.repairBatch(b.batch.Domain, b.batch.ID)
			}
			if !handed {
				return nil, fmt.Errorf("authz: batch %d is recorded, but its token could not be published (%w), nor handed to be published later: send it again only with the same idempotency key", b.batch.ID, err)
			}
			return nil, fmt.Errorf("authz: batch %d is recorded, but its token could not be published yet (%w); authz publishes it as soon as it can: send it again only with the same idempotency key", b.batch.ID, err)
		}
	}
	return &api.SendReply{ID: b.batch.ID, Domain: b.batch.Domain, Priority: b.batch.Priority, Duplicate: b.dup, RunAt: b.batch.RunAt}, nil
}

type built struct {
	batch    *pipeline.Batch
	dup      bool
	terminal bool // a duplicate whose batch already finished
}

// build checks a submission, takes a concurrency slot and records the batch,
// without queueing it.
func (s *Service) build(ctx context.Context, sub *submission) (*built, error) {
	name, l, user, key, idem, force := sub.label, sub.l, sub.user, sub.key, sub.idem, sub.force
	now := s.opts.Now()
	b, err := l.Build(name, user, sub.calls, key, now)
	if err != nil {
		return nil, err
	}
	b.Priority = sub.prio
	if !sub.runAt.IsZero() {
		// Expiry counts from when the batch may run.
		b.RunAt = sub.runAt.UTC()
		if l.Expiry > 0 {
			b.ExpiresAt = b.RunAt.Add(l.Expiry.D()).UTC()
		}
	}
	if idem != "" {
		if rep, err := s.repeated(ctx, user, idem, b); rep != nil || err != nil {
			return rep, err
		}
	}
	if key != "" && !force {
		if err := s.keyOrders.checkKeyBound(ctx, name, l, user, b.Domain, key); err != nil {
			return nil, err
		}
	}
	id, dup, err := s.assignID(ctx, user, idem)
	if err != nil {
		return nil, err
	}
	b.ID, b.CreatedAt = id, now.UTC()
	// A duplicate takes its slot too: the submission it repeats may have
	// died before it took one (reserve keeps a slot already held).
	if err := s.slots.reserveSlots(ctx, name, l, user, id, force); err != nil {
		return nil, err
	}
	// Indexed only once admitted: a submission refused for its label's
	// concurrency leaves no index key behind.
	// The index key and the record are published together, and their
	// PubAcks awaited together.
	index, err := s.submitters.startIndex(b.Submitter, id)
	if err != nil {
		return nil, err
	}
	first, created, err := submit.CreateAcked(ctx, s.acks, s.batches, b, idem, dup)
	if created != nil {
		s.store.recent.put(b.ID, created)
	}
	if errors.Is(err, jetstream.ErrKeyExists) && idem != "" {
		// A concurrent submission with the same key got the same id as a
		// duplicate and recorded its batch first.
		rec, rerr := s.store.record(ctx, id)
		if rerr != nil {
			return nil, rerr
		}
		first, dup, err = &rec.Batch, true, nil
	}
	if err != nil {
		return nil, err
	}
	if dup {
		if err := sameSubmission(idem, first, b); err != nil {
			return nil, err
		}
	}
	if err := s.submitters.indexed(ctx, b.Submitter, id, index); err != nil {
		return nil, err
	}
	if idem != "" {
		if _, err := s.batches.Create(ctx, streams.IdempotencyKey(user, idem), []byte(fmt.Sprint(first.ID))); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("authz: remember idempotency key: %w", err)
		}
	}
	if !dup {
		s.opts.Telemetry.BatchSubmitted(ctx, first)
	}
	// The batch record is the audit trail; a line per batch would cost every
	// submission, and so would building the line's attributes when it is off.
	if s.log.Enabled(ctx, slog.LevelDebug) {
		s.log.Debug("batch accepted", "batch_id", first.ID, "label", name, "user", user, "domain", first.Domain, "priority", first.Priority)
	}
	return &built{batch: first, dup: dup}, nil
}

// repeated answers a submission whose idempotency key named a batch
// already; nil when it named none.
func (s *Service) repeated(ctx context.Context, user, idem string, b *pipeline.Batch) (*built, error) {
	id, ok, err := s.store.idempotent(ctx, user, idem)
	if err != nil || !ok {
		return nil, err
	}
	rec, err := s.store.record(ctx, id)
	if ae := (*Error)(nil); errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		// Its batch finished and its record expired. The key stays as
		// long as the id log would give the resend the same id (expiry).
		return nil, errf(api.CodeConflict, "authz: batch %d, sent with this idempotency key, finished and its record expired; send it with a new idempotency key", id)
	}
	if err != nil {
		return nil, err
	}
	if err := sameSubmission(idem, &rec.Batch, b); err != nil {
		return nil, err
	}
	return &built{batch: &rec.Batch, dup: true, terminal: rec.Status.Terminal()}, nil
}

// assignID takes the batch's id: from this replica's reserved block, or,
// for a submission with an idempotency key, from the id log deduplicated
// by the key, so that concurrent duplicates get the same id (dup).
func (s *Service) assignID(ctx context.Context, user, idem string) (id uint64, dup bool, err error) {
	if idem == "" {
		id, err = s.ids.Next(ctx)
		return id, false, err
	}
	return submit.AssignID(ctx, s.js, streams.IdempotencyKey(user, idem))
}

// sameSubmission refuses, as a conflict, a submission that reuses the
// idempotency key of a different one: another label, key, function type,
// payload or expected confirmation. A retry must ask for the same thing.
func sameSubmission(idem string, first, again *pipeline.Batch) error {
	if fingerprint(first) != fingerprint(again) {
		return errf(api.CodeConflict, "authz: idempotency key %q was used for batch %d, a different submission (label, key or functions differ); a new submission needs a new key", logging.Capped(idem), first.ID)
	}
	return nil
}

// fingerprint identifies what a submission asks for: its label, its key and
// each function's type, payload and expected confirmation. Payloads are
// compared as the JSON values they are, whatever order their keys were
// stored in.
func fingerprint(b *pipeline.Batch) [sha256.Size]byte {
	h := sha256.New()
	field := func(v []byte) {
		_ = binary.Write(h, binary.BigEndian, uint64(len(v)))
		h.Write(v)
	}
	field([]byte(b.Label))
	field([]byte(b.Key))
	for _, f := range b.Functions {
		field([]byte(f.Type))
		p, err := json.Marshal(f.Payload)
		if err != nil {
			p = f.Payload // not valid msgpack: compare the bytes
		}
		field(p)
		var expect string
		if f.Confirm != nil {
			expect = f.Confirm.Expect
		}
		field([]byte(expect))
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func (s *Service) batch(ctx context.Context, user string, req *api.IDRequest) (any, error) {
	rec, err := s.store.record(ctx, req.ID)
	if ae := (*Error)(nil); errors.As(err, &ae) && ae.Code == api.CodeNotFound {
		return nil, s.store.notFound(ctx, req.ID)
	}
	if err != nil {
		return nil, err
	}
	if user != s.opts.Owner && user != rec.Batch.Submitter {
		// Do not tell others whether the batch exists.
		return nil, errf(api.CodeNotFound, "authz: no batch %d", req.ID)
	}
	rep := &api.BatchReply{Record: apiRecord(rec), Outputs: rec.Outputs}
	if st, err := s.progressStore.Load(ctx, rec.Batch.Domain, rec.Batch.ID); err == nil && st.Rev != 0 {
		rep.Progress = apiProgress(&st.Progress)
		if !rec.Status.Terminal() || (len(rec.Outputs) == 0 && rec.Outcome != nil && rec.Outcome.Executed > 0) {
			// Running; or finished by a callback that carried no
			// outputs (of an older processor): the progress has them.
			rep.Outputs = st.Outputs
		}
	}
	if rep.Outputs == nil {
		rep.Outputs = []pipeline.Output{}
	}
	rep.Scheduled = rep.Progress == nil && rec.Status == pipeline.InProcess && rec.Batch.Scheduled(s.opts.Now())
	return rep, nil
}

func (s *Service) pause(ctx context.Context, user string, req *api.DomainRequest) (any, error) {
	return s.setPaused(ctx, user, req, true)
}

func (s *Service) resume(ctx context.Context, user string, req *api.DomainRequest) (any, error) {
	return s.setPaused(ctx, user, req, false)
}

func (s *Service) setPaused(ctx context.Context, user string, req *api.DomainRequest, paused bool) (any, error) {
	if err := pipeline.ValidateDomain(req.Domain); err != nil {
		return nil, err
	}
	v, _ := json.Marshal(streams.DomainState{Paused: paused, By: user, At: s.opts.Now().UTC()})
	if _, err := s.state.Put(ctx, req.Domain, v); err != nil {
		return nil, fmt.Errorf("authz: set pause state: %w", err)
	}
	s.log.Info("domain state changed", "domain", req.Domain, "paused", paused, "by", user)
	return &api.StateReply{Domain: req.Domain, Paused: paused}, nil
}

// confirm stores a confirmation for the processor, naming the caller as
// the confirmer: the caller comes from the subject, so nobody confirms in
// another's name. Only callers who may know about the batch learn why a
// confirmation is refused: the owner, the submitter and the identities the
// batch's confirmation rules let confirm one of its functions (mayKnow).
// Everyone else gets the answer a batch that does not exist gets, so
// confirm cannot be used to find out which batches exist.
func (s *Service) confirm(ctx context.Context, user string, req *api.ConfirmRequest) (any, error) {
	hidden := errf(api.CodeNotFound, "authz: no batch %d with function %d waiting for your confirmation", req.ID, req.Index)
	rec, err := s.store.recordFor(ctx, req.ID, hidden, func(b *pipeline.Batch) bool { return s.mayKnow(user, b) })
	if err != nil {
		return nil, err
	}
	b := &rec.Batch
	if req.Index < 0 || req.Index >= len(b.Functions) || confirmRule(&b.Functions[req.Index]) == nil {
		return nil, errf(api.CodeBadRequest, "authz: function %d of batch %d takes no confirmation", req.Index, req.ID)
	}
	if rule := confirmRule(&b.Functions[req.Index]); !mayConfirm(rule, user) {
		return nil, errf(api.CodeForbidden, "authz: %q may not confirm function %d of batch %d (allowed: %v)", user, req.Index, req.ID, rule.By)
	}
	if rec.Status.Terminal() {
		return nil, errf(api.CodeConflict, "authz: batch %d is already %s", req.ID, rec.Status)
	}
	if err := s.senderPool.checkInclusionConfirm(ctx, b, req); err != nil {
		return nil, err
	}
	data, err := streams.Encode(&streams.Confirmation{Content: req.Content, By: user, Ref: req.Ref})
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(streams.ConfirmSubject(b.Domain, b.ID, req.Index))
	m.Data = data
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		return nil, fmt.Errorf("authz: store confirmation: %w", err)
	}
	return &api.ConfirmReply{ID: req.ID, Index: req.Index}, nil
}

// mayKnow says whether user may learn that batch b exists and why a
// confirmation of it is refused: the owner, the submitter, and whoever may
// confirm one of its functions.
func (s *Service) mayKnow(user string, b *pipeline.Batch) bool {
	if user == s.opts.Owner || user == b.Submitter {
		return true
	}
	for i := range b.Functions {
		if rule := confirmRule(&b.Functions[i]); rule != nil && mayConfirm(rule, user) {
			return true
		}
	}
	return false
}

// mayConfirm says whether user may confirm a function with this rule: an
// empty By lets anyone authz serves.
func mayConfirm(rule *pipeline.Confirmation, user string) bool {
	return len(rule.By) == 0 || contains(rule.By, user)
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (s *Service) reload(ctx context.Context, _ string, _ *struct{}) (any, error) {
	if err := s.Reload(); err != nil {
		return nil, errf(api.CodeBadRequest, "%v", err)
	}
	warnings := s.WarnUnserved(ctx, "reload")
	if warnings == nil {
		warnings = []string{}
	}
	return &api.ReloadReply{Labels: len(s.Table().Labels), Warnings: warnings}, nil
}

// pageLimit checks a listing's limit: 1 to most, or 0 for def.
func pageLimit(limit, def, most int) (int, error) {
	switch {
	case limit < 0 || limit > most:
		return 0, errf(api.CodeBadRequest, "authz: limit %d: expected 1 to %d, or 0 for %d", limit, most, def)
	case limit == 0:
		return def, nil
	}
	return limit, nil
}
