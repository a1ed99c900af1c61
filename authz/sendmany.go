package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// sendManyBody decodes a send_many request (decodeSendMany) and submits its
// batches.
func (s *Service) sendManyBody(ctx context.Context, user string, body []byte) (any, error) {
	var req api.SendManyRequest
	if err := decodeSendMany(body, &req); err != nil {
		return nil, err
	}
	rep, err := s.intake.sendMany(ctx, user, req.Batches)
	if err != nil {
		return nil, err
	}
	if ae := rep.firstInternal; ae != nil {
		s.log.Error("request failed", "op", api.OpSendMany, "user", user, "batch", rep.firstInternalAt,
			"err", logging.Cap(ae.Message, api.MaxErrorMessage))
	}
	return &rep.SendManyReply, nil
}

// sentMany is a send_many's reply, and the first failure inside authz
// that cut it short, if one did.
type sentMany struct {
	api.SendManyReply
	firstInternal   *Error
	firstInternalAt int
}

// sendMany submits each of reqs as send would, in their order, so that
// batches of one key join its order as they are listed. The request is
// counted against the caller's send rate as len(reqs) sends, all or none,
// before any is submitted. A batch refused for what it asks (a 4xx) does
// not stop the others; a failure inside authz (a 5xx) stops the request
// there, since the next batch would most likely fail the same way, each
// after its own wait: the batches not yet started are answered 503, not
// submitted, and may be sent again.
//
// Consecutive plain batches (together) are submitted together, a chunk at a
// time (sendRun): their records written before any is awaited, then their
// tokens. A batch of a chunk is started before the failure of one listed
// ahead of it is known, so a failure inside stops only the batches after
// the chunk; each batch of the chunk is answered by its own outcome.
func (ik *intake) sendMany(ctx context.Context, user string, reqs []api.SendRequest) (*sentMany, error) {
	n := len(reqs)
	if n == 0 {
		return nil, errf(api.CodeBadRequest, "authz: batches: none; expected 1 to %d batches to submit", api.MaxSendMany)
	}
	if n > api.MaxSendMany {
		return nil, errf(api.CodeBadRequest, "authz: batches: %d; one send_many submits at most %d batches", n, api.MaxSendMany)
	}
	t := ik.table()
	if err := ik.takeSends(t, user, n); err != nil {
		return nil, err
	}
	out := &sentMany{SendManyReply: api.SendManyReply{Results: make([]api.SendManyResult, n)}}
	var run []plainSend
	flush := func() {
		if len(run) > 0 {
			ik.sendRun(ctx, run, out)
			run = run[:0]
		}
	}
	for i := range reqs {
		if out.firstInternal != nil {
			out.Results[i] = notSubmitted(out.firstInternalAt)
			continue
		}
		sub, err := ik.check(t, user, &reqs[i])
		if err == nil && sub.together() {
			run = append(run, plainSend{i: i, sub: sub})
			continue
		}
		flush()
		if out.firstInternal != nil {
			out.Results[i] = notSubmitted(out.firstInternalAt)
			continue
		}
		if err == nil {
			var rep *api.SendReply
			if rep, err = ik.submit(ctx, sub); err == nil {
				out.Results[i] = api.Queued(rep)
				continue
			}
		}
		out.fail(i, err)
	}
	flush()
	return out, nil
}

// notSubmitted answers a batch not started after batch at failed inside
// authz.
func notSubmitted(at int) api.SendManyResult {
	return api.SendManyResult{Code: api.CodeUnavailable, Error: logging.Cap(
		fmt.Sprintf(api.NotSubmitted+"batch %d of this request failed inside authz; send this one again", at),
		api.MaxSendManyError)}
}

// fail answers batch i with err, and remembers the first failure inside
// authz (the first listed, of a chunk's).
func (out *sentMany) fail(i int, err error) {
	ae := asError(err)
	out.Results[i] = api.SendManyResult{Code: ae.Code, Error: logging.Cap(ae.Message, api.MaxSendManyError)}
	if ae.Code >= api.CodeInternal && (out.firstInternal == nil || i < out.firstInternalAt) {
		out.firstInternal, out.firstInternalAt = ae, i
	}
}

// together says the submission may be written together with others of a
// send_many: a plain one, or one that is plain but for its idempotency
// key, which is taken (all of a chunk's at once) before anything else is
// written for it.
func (sub *submission) together() bool {
	return sub.key == "" && sub.runAt.IsZero() && !sub.force &&
		sub.l.MaxPerSubmitter == 0 && sub.l.MaxConcurrent == 0
}

// plainSend is batch i of a send_many, a plain submission (or one with
// an idempotency key, together), on its way through sendRun.
type plainSend struct {
	i   int
	sub *submission
	// id and idemKey are the batch's id and the write of its idempotency
	// key, for a batch with one (takeKeys).
	id      uint64
	idemKey *submit.PendingCreate
	b       *pipeline.Batch
	index   *indexWrite
	rec     *submit.PendingRecord
	tok     *submit.PendingToken
}

// sendRunChunk is how many batches of a run are submitted together at
// most: between its record and its token a batch is recorded but not
// queued, and if authz dies there a batch without an idempotency key stays
// so (nothing else queues it), as a lone send's would. A chunk bounds
// those to 16 a request, and still shares each wait among 16 batches.
const sendRunChunk = 16

// sendRun submits a run of plain batches as submit would, each through
// the same steps in the same order (its record, its index entry, its
// token), but, chunk by chunk (sendRunChunk), a step of every batch of the
// chunk before the next step of any: the records and tokens go out
// together and their PubAcks are awaited together, instead of a round trip
// each, one batch after the other. Every batch is answered by its own
// outcome; a failure inside authz before a batch's record went out stops
// the ones after it.
func (ik *intake) sendRun(ctx context.Context, run []plainSend, out *sentMany) {
	for len(run) > 0 {
		n := min(len(run), sendRunChunk)
		ik.sendChunk(ctx, run[:n], out)
		run = run[n:]
	}
}

// sendChunk is sendRun for a chunk of a run.
func (ik *intake) sendChunk(ctx context.Context, chunk []plainSend, out *sentMany) {
	chunk, repeats := ik.takeKeys(ctx, chunk, out)
	defer func() {
		// A batch whose idempotency key was written before is a repeat:
		// submit answers it as a lone send would.
		for _, p := range repeats {
			if out.firstInternal != nil && p.i > out.firstInternalAt {
				out.Results[p.i] = notSubmitted(out.firstInternalAt)
				continue
			}
			rep, err := ik.submit(ctx, p.sub)
			if err != nil {
				out.fail(p.i, err)
				continue
			}
			out.Results[p.i] = api.Queued(rep)
		}
	}()
	started := chunk[:0:0]
	for _, p := range chunk {
		if out.firstInternal != nil && p.i > out.firstInternalAt {
			out.Results[p.i] = notSubmitted(out.firstInternalAt)
			continue
		}
		if err := ik.startPlain(ctx, &p); err != nil {
			out.fail(p.i, err)
			continue
		}
		started = append(started, p)
	}
	recorded := started[:0]
	for _, p := range started {
		created, err := p.rec.Wait(ctx)
		if err == nil {
			ik.store.recent.put(p.b.ID, created)
			recorded = append(recorded, p)
			continue
		}
		if p.sub.idem != "" && errors.Is(err, jetstream.ErrKeyExists) {
			// A concurrent repeat of its key recorded it first.
			repeats = append(repeats, p)
			continue
		}
		out.fail(p.i, err)
	}
	queued := recorded[:0]
	for _, p := range recorded {
		if err := ik.submitters.indexed(ctx, p.b.Submitter, p.b.ID, p.index); err != nil {
			out.fail(p.i, err)
			continue
		}
		ik.tel.BatchSubmitted(ctx, p.b)
		if ik.log.Enabled(ctx, slog.LevelDebug) {
			ik.log.Debug("batch accepted", "batch_id", p.b.ID, "label", p.sub.label, "user", p.sub.user, "domain", p.b.Domain, "priority", p.b.Priority)
		}
		var (
			tok *submit.PendingToken
			err error
		)
		if p.sub.idem == "" {
			// Fresh (see fresh): its first token without a deduplication id.
			tok, err = submit.StartNewToken(ctx, ik.acks, p.b, ik.now())
		} else {
			tok, err = submit.StartToken(ctx, ik.acks, p.b, 0, 0)
		}
		if err != nil {
			out.fail(p.i, ik.unqueued(p.b, err))
			continue
		}
		p.tok = tok
		queued = append(queued, p)
	}
	for _, p := range queued {
		if err := p.tok.Wait(ctx, ik.js); err != nil {
			out.fail(p.i, ik.unqueued(p.b, err))
			continue
		}
		out.Results[p.i] = api.Queued(&api.SendReply{ID: p.b.ID, Domain: p.b.Domain, Priority: p.b.Priority})
	}
}

// takeKeys takes the idempotency keys of the chunk's batches that have
// one, as takeKey does for a lone send, but all at once: an id each from
// the replica's block, then their keys' writes published together and
// awaited together. It returns the chunk's batches that go on together
// (without a key, or with the key taken) and the repeats, whose key was
// written before; a batch whose key could not be written is answered.
func (ik *intake) takeKeys(ctx context.Context, chunk []plainSend, out *sentMany) (together, repeats []plainSend) {
	if !slices.ContainsFunc(chunk, func(p plainSend) bool { return p.sub.idem != "" }) {
		return chunk, nil
	}
	// Every batch of the chunk takes its id now, in the request's order,
	// so that ids follow the list (a repeat's is not used).
	for i := range chunk {
		p := &chunk[i]
		if out.firstInternal != nil {
			continue
		}
		if p.sub.idem != "" {
			// Checked before its key is taken: a batch refused for what
			// it asks leaves no key behind.
			b, err := p.sub.l.Build(p.sub.label, p.sub.user, p.sub.calls, "", ik.now())
			if err != nil {
				out.fail(p.i, err)
				continue
			}
			p.b = b
		}
		id, err := ik.ids.Next(ctx)
		if err == nil && p.sub.idem != "" {
			if p.idemKey, err = ik.startKey(p.sub.user, p.sub.idem, id); err != nil {
				err = fmt.Errorf("authz: take idempotency key: %w", err)
			}
		}
		if err != nil {
			out.fail(p.i, err)
			continue
		}
		p.id = id
	}
	together = chunk[:0:0]
	for _, p := range chunk {
		switch {
		case p.id == 0 && out.Results[p.i] == (api.SendManyResult{}):
			out.Results[p.i] = notSubmitted(out.firstInternalAt)
			continue
		case p.id == 0: // answered: its id or key could not be taken
			continue
		case p.sub.idem == "":
			together = append(together, p)
			continue
		}
		_, err := p.idemKey.Wait(ctx)
		switch {
		case err == nil:
			together = append(together, p)
		case errors.Is(err, jetstream.ErrKeyExists):
			repeats = append(repeats, p)
		default:
			out.fail(p.i, fmt.Errorf("authz: take idempotency key: %w", err))
		}
	}
	return together, repeats
}

// startPlain builds p's batch, takes its id (unless takeKeys took it),
// starts its index entry and publishes its record, as build does for a
// plain submission.
func (ik *intake) startPlain(ctx context.Context, p *plainSend) error {
	sub, now := p.sub, ik.now()
	b := p.b // built already by takeKeys, for a batch with a key
	var err error
	if b == nil {
		if b, err = sub.l.Build(sub.label, sub.user, sub.calls, "", now); err != nil {
			return err
		}
	}
	b.Priority = sub.prio
	if b.ID = p.id; b.ID == 0 {
		if b.ID, err = ik.ids.Next(ctx); err != nil {
			return err
		}
	}
	b.CreatedAt = now.UTC()
	if p.index, err = ik.submitters.startIndex(b.Submitter, b.ID); err != nil {
		return err
	}
	if p.rec, err = submit.StartRecord(ik.acks, ik.batches, b, sub.idem); err != nil {
		return err
	}
	p.b = b
	return nil
}
