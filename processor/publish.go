package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// publishToken appends the batch's token at its current step to the back of its queue.
func (p *Processor) publishToken(ctx context.Context, b *pipeline.Batch, prog *streams.Progress) error {
	m, err := streams.TokenMsg(streams.RequeueSubject(b.Priority, b.Domain), b, prog.Gen, prog.Rotation)
	if err != nil {
		return err
	}
	telemetry.Inject(ctx, m.Header)
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("processor: requeue batch %d: %w", b.ID, err)
	}
	return nil
}

// callbackMsg is the terminal callback, deduplicated by batch id. It
// carries the outputs, which authz keeps in the batch record for the
// submitter: a batch that finished at its first step has them nowhere else
// authz may read. They fit: fits bounds them below max_payload beside the
// batch.
func (p *Processor) callbackMsg(b *pipeline.Batch, prog *streams.Progress, dlSeq uint64) (*nats.Msg, error) {
	at := prog.UpdatedAt
	if at.IsZero() {
		// A batch that succeeded at its first step wrote no progress
		// (finish skips it): it finished now.
		at = p.opts.Now().UTC()
	}
	cb := &streams.Callback{
		BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Outcome: *prog.Outcome,
		Attempts: prog.Attempts(b.Subroutine.Mode == pipeline.Atomic), At: at, Processor: p.opts.Name,
		Fallback: len(prog.Fallbacks) > 0, DeadLetter: dlSeq, Outputs: prog.Outputs,
	}
	return streams.CallbackMsg(cb)
}

// publishDeadLetter writes the batch to the DLQ and returns its sequence.
func (p *Processor) publishDeadLetter(ctx context.Context, b *pipeline.Batch, prog *streams.Progress, m jetstream.Msg) (uint64, error) {
	dl := &streams.DeadLetter{
		Batch: *b, Domain: b.Domain, Index: prog.FailedIndex, Error: prog.LastError,
		Attempts: prog.Attempts(b.Subroutine.Mode == pipeline.Atomic), Outcome: *prog.Outcome, Outputs: prog.Outputs, At: prog.UpdatedAt,
	}
	if b.Subroutine.Mode == pipeline.Atomic {
		dl.Index = -1
	}
	if m != nil {
		dl.Origin.Subject = m.Subject()
		if md, err := streams.DeliveryOf(m.Reply()); err == nil {
			dl.Origin.Stream, dl.Origin.Seq = md.Stream, md.StreamSeq
		}
	}
	data, err := streams.Encode(dl)
	if err == nil && len(data) > p.maxRecord() && len(dl.Outputs) > 0 {
		// The dead letter must fit: the outputs' data goes, their index
		// and type stay; the batch (needed to replay it) stays whole.
		trimmed := make([]pipeline.Output, len(dl.Outputs))
		for i, o := range dl.Outputs {
			trimmed[i] = pipeline.Output{Index: o.Index, Type: o.Type}
		}
		dl.Outputs = trimmed
		dl.Error += fmt.Sprintf(" (the outputs' data, %d bytes with the rest, is left out of this dead letter)", len(data))
		data, err = streams.Encode(dl)
	}
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(streams.DLQSubject(b.Domain))
	msg.Data = data
	msg.Header.Set(streams.HeaderBatchID, strconv.FormatUint(b.ID, 10))
	msg.Header.Set(streams.HeaderDomain, b.Domain)
	msg.Header.Set(streams.HeaderPriority, string(b.Priority))
	msg.Header.Set(streams.HeaderOutcome, prog.Outcome.String())
	msg.Header.Set(streams.HeaderReason, headerValue(prog.LastError))
	msg.Header.Set(streams.HeaderOrigin, dl.Origin.Subject)
	msg.Header.Set(nats.MsgIdHdr, streams.DeadLetterMsgID(b.ID))
	ack, err := p.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("processor: dead letter of batch %d: %w", b.ID, err)
	}
	return ack.Sequence, nil
}

// deadLetterRaw copies an undecodable token to the DLQ, then terminates it.
func (p *Processor) deadLetterRaw(ctx context.Context, m jetstream.Msg, cause error) {
	msg := nats.NewMsg(streams.DLQSubject(p.opts.Domain))
	msg.Data = m.Data()
	msg.Header.Set(streams.HeaderDomain, p.opts.Domain)
	msg.Header.Set(streams.HeaderReason, headerValue(cause.Error()))
	msg.Header.Set(streams.HeaderOrigin, m.Subject())
	if _, err := p.js.PublishMsg(ctx, msg); err != nil {
		p.log.Error("dead letter of an undecodable token failed; redelivered later", "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.TermWithReason(cause.Error())
}

// work sends a request to the workers and returns their reply. Only a
// handler's answer counts as an attempt: a worker that says it is busy,
// that does not answer in time (it may be running the call still, and its
// completion record will answer a retry) and no worker at all are errors
// that notAttempted recognises. A request too large to send is a permanent
// failure.
func (p *Processor) work(ctx context.Context, subject string, req *streams.WorkRequest) (*streams.WorkReply, error) {
	data, err := streams.Encode(req)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.opts.WorkTimeout)
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(streams.HeaderDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	telemetry.Inject(ctx, msg.Header)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	resp, err := p.nc.RequestMsgWithContext(rctx, msg)
	index := 0
	if len(req.Calls) > 0 {
		index = req.Calls[0].Index
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: %s", errNoWorker, subject)
	case errors.Is(err, nats.ErrMaxPayload):
		return &streams.WorkReply{Error: &streams.WorkError{
			Message:   fmt.Sprintf("the work request of %d bytes exceeds the server's max_payload of %d bytes", len(data), p.nc.MaxPayload()),
			Permanent: true, Index: index,
		}}, nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w within %s: %s", errNoAnswer, p.opts.WorkTimeout, subject)
	case err != nil:
		return nil, fmt.Errorf("processor: work request %s: %w", subject, err)
	}
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		desc := resp.Header.Get(micro.ErrorHeader)
		if code == streams.WorkCodeUnavailable {
			return nil, fmt.Errorf("%w: worker unavailable: %s", errBusy, desc)
		}
		return &streams.WorkReply{Error: &streams.WorkError{Message: "worker refused the request: " + desc, Permanent: true, Index: index}}, nil
	}
	rep, err := streams.Decode[streams.WorkReply](resp.Data)
	if err != nil {
		return nil, err
	}
	return answerOf(&rep)
}

// answerOf is a worker's reply as work returns it: a call the worker did
// not attempt (running elsewhere, its record unreadable, no slot) is an
// error matching errBusy, tried again later without counting an attempt.
func answerOf(rep *streams.WorkReply) (*streams.WorkReply, error) {
	if rep.Error != nil && rep.Error.Busy {
		return nil, fmt.Errorf("%w: %s", errBusy, rep.Error.Message)
	}
	return rep, nil
}

// fallback asks a worker for function k's fallback. It returns the output
// when the fallback handled the failure, nil when there is none or it failed.
func (p *Processor) fallback(ctx context.Context, b *pipeline.Batch, prog *streams.Progress, failed failure, failures int) (*pipeline.Output, error) {
	k := failed.index
	f := b.Functions[k]
	rep, err := p.work(ctx, streams.FallbackSubject(f.Type), &streams.WorkRequest{
		BatchID: b.ID, Domain: b.Domain, Key: b.Key, CreatedAt: b.CreatedAt,
		Submitter: b.Submitter, Label: b.Label,
		Attempt: failures, Round: prog.RoundOf(k),
		Calls:  []streams.WorkCall{{Index: k, Type: f.Type, Payload: f.Payload}},
		Inputs: prog.Outputs,
		Failure: &pipeline.Failure{
			BatchID: b.ID, Index: k, Key: b.Key, CreatedAt: b.CreatedAt,
			Failures: failures, LastError: prog.LastError, Exhausted: failed.exhausted,
		},
	})
	if errors.Is(err, errNoWorker) {
		return nil, nil // no fallback registered anywhere
	}
	if err != nil {
		return nil, err
	}
	if rep.Error != nil {
		if !rep.Error.NoFallback {
			prog.LastError = fmt.Sprintf("%s; fallback failed: %s", prog.LastError, rep.Error.Message)
		}
		return nil, nil
	}
	out := pipeline.Output{Index: k, Type: f.Type}
	if len(rep.Outputs) > 0 {
		out = rep.Outputs[0]
	}
	return &out, nil
}

// headerValue makes s fit a header: one line, at most 1 KiB.
func headerValue(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 1<<10 {
		n := 1 << 10
		for n > 0 && s[n]&0xC0 == 0x80 {
			n--
		}
		s = s[:n] + "…"
	}
	return s
}
