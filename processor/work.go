package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// workClient sends the requests of steps to the workers: a function's call,
// its fallback, an inclusion's poll or hook, and a unit on its own.
type workClient struct {
	nc *nats.Conn
	// timeout bounds one request (Options.WorkTimeout).
	timeout time.Duration
}

// call sends a request to the workers and returns their reply. Only a
// handler's answer counts as an attempt: a worker that says it is busy,
// that does not answer in time (it may be running the call still, and its
// completion record will answer a retry) and no worker at all are errors
// that notAttempted recognises. A request too large to send is a permanent
// failure.
func (w *workClient) call(ctx context.Context, subject string, req *records.WorkRequest) (*records.WorkReply, error) {
	data, err := records.Encode(req)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(w.timeout)
	msg := nats.NewMsg(subject)
	msg.Data = data
	msg.Header.Set(streams.HeaderDeadline, strconv.FormatInt(deadline.UnixNano(), 10))
	telemetry.Inject(ctx, msg.Header)
	rctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	resp, err := w.nc.RequestMsgWithContext(rctx, msg)
	index := 0
	if len(req.Calls) > 0 {
		index = req.Calls[0].Index
	}
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: %s", errNoWorker, subject)
	case errors.Is(err, nats.ErrMaxPayload):
		return &records.WorkReply{Error: &records.WorkError{
			Message:   fmt.Sprintf("the work request of %d bytes exceeds the server's max_payload of %d bytes", len(data), w.nc.MaxPayload()),
			Permanent: true, Index: index,
		}}, nil
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w within %s: %s", errNoAnswer, w.timeout, subject)
	case err != nil:
		return nil, fmt.Errorf("processor: work request %s: %w", subject, err)
	}
	if code := resp.Header.Get(micro.ErrorCodeHeader); code != "" {
		desc := resp.Header.Get(micro.ErrorHeader)
		if code == streams.WorkCodeUnavailable {
			return nil, fmt.Errorf("%w: worker unavailable: %s", errBusy, desc)
		}
		return &records.WorkReply{Error: &records.WorkError{Message: "worker refused the request: " + desc, Permanent: true, Index: index}}, nil
	}
	rep, err := records.Decode[records.WorkReply](resp.Data)
	if err != nil {
		return nil, err
	}
	return answerOf(&rep)
}

// answerOf is a worker's reply as call returns it: a call the worker did
// not attempt (running elsewhere, its record unreadable, no slot) is an
// error matching errBusy, tried again later without counting an attempt.
func answerOf(rep *records.WorkReply) (*records.WorkReply, error) {
	if rep.Error != nil && rep.Error.Busy {
		return nil, fmt.Errorf("%w: %s", errBusy, rep.Error.Message)
	}
	return rep, nil
}

// fallback asks a worker for function k's fallback. It returns the output
// when the fallback handled the failure, nil when there is none or it failed.
func (w *workClient) fallback(ctx context.Context, b *pipeline.Batch, prog *records.Progress, failed failure, failures int) (*pipeline.Output, error) {
	k := failed.index
	f := b.Functions[k]
	rep, err := w.call(ctx, streams.FallbackSubject(f.Type), &records.WorkRequest{
		BatchID: b.ID, Domain: b.Domain, Key: b.Key, CreatedAt: b.CreatedAt,
		Submitter: b.Submitter, Label: b.Label,
		Attempt: failures, Round: prog.RoundOf(k),
		Calls:  []records.WorkCall{{Index: k, Type: f.Type, Payload: f.Payload}},
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
