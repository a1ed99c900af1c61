package authz

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// endpoints is the API: every operation, whether only the owner may call
// it, and its handler, which receives the request decoded (decodeJSON)
// after the owner check.
func (s *Service) endpoints() []endpoint {
	const owner = true
	return []endpoint{
		{api.OpSend, "submit a batch under an authorization label", !owner, s.sendBody},
		{api.OpSendMany, "submit up to 1000 batches in one request, each as send would", !owner, s.sendManyBody},
		{api.OpBatch, "the record of one batch", !owner, op(s.store.batch)},
		{api.OpConfirm, "confirm a function waiting for a confirmation", !owner, op(s.confirm)},
		{api.OpQueue, "a domain's queue in order, [from, to)", owner, op(s.queueEdits.queue)},
		{api.OpPause, "pause a domain's processors", owner, op(s.queueEdits.pause)},
		{api.OpResume, "resume a domain's processors", owner, op(s.queueEdits.resume)},
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
	return s.intake.send(ctx, user, &req)
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
	data, err := records.Encode(&records.Confirmation{Content: req.Content, By: user, Ref: req.Ref})
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
