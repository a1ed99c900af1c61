package processor

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/telemetry"
)

// publisher writes what a step leads to: the batch's token at the back of
// its queue, its dead letter, its terminal callback, and, for a token taken
// by a tick, the last write of its step without waiting (deferred).
type publisher struct {
	js    jetstream.JetStream
	async *jsapi.AckPublisher // the deferred writes
	// groups publishes the callbacks of deferred tokens together.
	groups *callbackGrouper
	limits recordLimits
	domain string
	name   string // this replica (Options.Name), in callbacks
	now    func() time.Time
	log    *slog.Logger
	fault  crashPoints
}

// token appends the batch's token at its current step to the back of its queue.
func (pb *publisher) token(ctx context.Context, b *pipeline.Batch, prog *records.Progress) error {
	m, err := streams.TokenMsg(streams.RequeueSubject(b.Priority, b.Domain), b, prog.Gen, prog.Rotation)
	if err != nil {
		return err
	}
	telemetry.Inject(ctx, m.Header)
	if _, err := pb.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("processor: requeue batch %d: %w", b.ID, err)
	}
	return nil
}

// callback is the terminal callback, deduplicated by batch id. It
// carries the outputs, which authz keeps in the batch record for the
// submitter: a batch that finished at its first step has them nowhere else
// authz may read. They fit: fits bounds them below max_payload beside the
// batch.
//
// trace, when not nil, is the step's trace context, carried in the body for
// a callback that may travel in a group (a group's headers are its own).
func (pb *publisher) callback(b *pipeline.Batch, prog *records.Progress, dlSeq uint64, trace map[string]string) (*nats.Msg, error) {
	at := prog.UpdatedAt
	if at.IsZero() {
		// A batch that succeeded at its first step wrote no progress
		// (finish skips it): it finished now.
		at = pb.now().UTC()
	}
	cb := &records.Callback{
		BatchID: b.ID, Domain: b.Domain, Priority: b.Priority, Outcome: *prog.Outcome,
		Attempts: prog.Attempts(b.Subroutine.Mode == pipeline.Atomic), At: at, Processor: pb.name,
		Fallback: len(prog.Fallbacks) > 0, DeadLetter: dlSeq, Outputs: prog.Outputs, Trace: trace,
	}
	return streams.CallbackMsg(cb)
}

// deadLetter writes the batch to the DLQ and returns its sequence.
func (pb *publisher) deadLetter(ctx context.Context, b *pipeline.Batch, prog *records.Progress, m jetstream.Msg) (uint64, error) {
	dl := &records.DeadLetter{
		Batch: *b, Domain: b.Domain, Index: prog.FailedIndex, Error: prog.LastError,
		Attempts: prog.Attempts(b.Subroutine.Mode == pipeline.Atomic), Outcome: *prog.Outcome, Outputs: prog.Outputs, At: prog.UpdatedAt,
	}
	if b.Subroutine.Mode == pipeline.Atomic {
		dl.Index = -1
	}
	if m != nil {
		dl.Origin.Subject = m.Subject()
		if md, err := jsapi.DeliveryOf(m.Reply()); err == nil {
			dl.Origin.Stream, dl.Origin.Seq = md.Stream, md.StreamSeq
		}
	}
	data, err := records.Encode(dl)
	if err == nil && len(data) > pb.limits.maxRecord() && len(dl.Outputs) > 0 {
		// The dead letter must fit: the outputs' data goes, their index
		// and type stay; the batch (needed to replay it) stays whole.
		trimmed := make([]pipeline.Output, len(dl.Outputs))
		for i, o := range dl.Outputs {
			trimmed[i] = pipeline.Output{Index: o.Index, Type: o.Type}
		}
		dl.Outputs = trimmed
		dl.Error += fmt.Sprintf(" (the outputs' data, %d bytes with the rest, is left out of this dead letter)", len(data))
		data, err = records.Encode(dl)
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
	ack, err := pb.js.PublishMsg(ctx, msg)
	if err != nil {
		return 0, fmt.Errorf("processor: dead letter of batch %d: %w", b.ID, err)
	}
	return ack.Sequence, nil
}

// deadLetterRaw copies an undecodable token to the DLQ, then terminates it.
func (pb *publisher) deadLetterRaw(ctx context.Context, m jetstream.Msg, cause error) {
	msg := nats.NewMsg(streams.DLQSubject(pb.domain))
	msg.Data = m.Data()
	msg.Header.Set(streams.HeaderDomain, pb.domain)
	msg.Header.Set(streams.HeaderReason, headerValue(cause.Error()))
	msg.Header.Set(streams.HeaderOrigin, m.Subject())
	if _, err := pb.js.PublishMsg(ctx, msg); err != nil {
		pb.log.Error("dead letter of an undecodable token failed; redelivered later", "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.TermWithReason(cause.Error())
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
