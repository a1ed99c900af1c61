package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/streams"
)

// publishToken appends the batch's token at its current step to the back of its queue.
func (p *Processor) publishToken(ctx context.Context, b *pipeline.Batch, prog *streams.Progress) error {
	m, err := streams.TokenMsg(streams.RequeueSubject(b.Priority, b.Domain), b, prog.Gen, prog.Step)
	if err != nil {
		return err
	}
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("processor: requeue batch %d: %w", b.ID, err)
	}
	return nil
}

// publishCallback publishes the terminal callback, deduplicated by batch id.
func (p *Processor) publishCallback(ctx context.Context, b *pipeline.Batch, prog *streams.Progress, dlSeq uint64) error {
	cb := &streams.Callback{
		BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Outcome: *prog.Outcome,
		Attempts: prog.Attempts(b.Subroutine.Mode == pipeline.Atomic), At: prog.UpdatedAt, Processor: p.opts.Name,
		Fallback: len(prog.Fallbacks) > 0, DeadLetter: dlSeq,
	}
	m, err := streams.CallbackMsg(cb)
	if err != nil {
		return err
	}
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("processor: callback of batch %d: %w", b.ID, err)
	}
	return nil
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
		if md, err := m.Metadata(); err == nil {
			dl.Origin.Stream, dl.Origin.Seq = md.Stream, md.Sequence.Stream
		}
	}
	data, err := streams.Encode(dl)
	if err != nil {
		return 0, err
	}
	msg := nats.NewMsg(streams.DLQSubject(b.Domain))
	msg.Data = data
	msg.Header.Set(streams.HeaderBatchID, strconv.FormatUint(b.ID, 10))
	msg.Header.Set(streams.HeaderDomain, b.Domain)
	msg.Header.Set(streams.HeaderPriority, string(b.Priority))
	msg.Header.Set(streams.HeaderOutcome, prog.Outcome.String())
	msg.Header.Set(streams.HeaderReason, prog.LastError)
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
	msg.Header.Set(streams.HeaderReason, cause.Error())
	msg.Header.Set(streams.HeaderOrigin, m.Subject())
	if _, err := p.js.PublishMsg(ctx, msg); err != nil {
		p.log.Error("dead letter of an undecodable token failed; redelivered later", "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.TermWithReason(cause.Error())
}

// errBusy means the worker did not attempt the call; the step is retried
// without counting an attempt.
var errBusy = errors.New("processor: call not attempted")

// errNoWorker means no worker serves the request's subject; the step is
// retried without counting an attempt.
var errNoWorker = errors.New("processor: no worker serves this function type")

// work sends a request to the workers and returns their reply. A worker
// that does not answer in time counts as a retryable failure; no worker at
// all is an error that does not count as an attempt.
func (p *Processor) work(ctx context.Context, subject string, req *streams.WorkRequest) (*streams.WorkReply, error) {
	data, err := streams.Encode(req)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(p.opts.WorkTimeout)
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(streams.HeaderDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
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
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return &streams.WorkReply{Error: &streams.WorkError{
			Message: fmt.Sprintf("worker did not answer within %s", p.opts.WorkTimeout), Retryable: true, Index: index,
		}}, nil
	case err != nil:
		return nil, fmt.Errorf("processor: work request %s: %w", subject, err)
	}
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		desc := resp.Header.Get(micro.ErrorHeader)
		if code == "503" {
			return nil, fmt.Errorf("processor: worker unavailable: %s", desc)
		}
		return &streams.WorkReply{Error: &streams.WorkError{Message: "worker refused the request: " + desc, Permanent: true, Index: index}}, nil
	}
	rep, err := streams.Decode[streams.WorkReply](resp.Data)
	if err != nil {
		return nil, err
	}
	if rep.Error != nil && rep.Error.Busy {
		// Not attempted (running elsewhere, or its record unreadable): try
		// again later without counting an attempt.
		return nil, fmt.Errorf("%w: %s", errBusy, rep.Error.Message)
	}
	return &rep, nil
}

// fallback asks a worker for function k's fallback. It returns the output
// when the fallback handled the failure, nil when there is none or it failed.
func (p *Processor) fallback(ctx context.Context, b *pipeline.Batch, prog *streams.Progress, k, failures int, exhausted bool) (*pipeline.Output, error) {
	f := b.Functions[k]
	rep, err := p.work(ctx, streams.FallbackSubject(f.Type), &streams.WorkRequest{
		BatchID: b.ID, Domain: b.Domain, Key: b.Key, CreatedAt: b.CreatedAt,
		Submitter: b.Submitter, Label: b.Label,
		Attempt: failures, Round: prog.RoundOf(k),
		Calls:  []streams.WorkCall{{Index: k, Type: f.Type, Payload: f.Payload}},
		Inputs: prog.Outputs,
		Failure: &pipeline.Failure{
			BatchID: b.ID, Index: k, Key: b.Key, CreatedAt: b.CreatedAt,
			Failures: failures, LastError: prog.LastError, Exhausted: exhausted,
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
