package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// confirmations applies the confirmations of the CONFIRM stream to the
// parked functions they settle, through the steps' writes (stepper).
type confirmations struct {
	steps *stepper
	log   *slog.Logger
	// streams are the queues' streams, where a settled function's timer
	// token is deleted.
	streams map[pipeline.Priority]jetstream.Stream
}

// handle applies one confirmation from the CONFIRM stream. A
// matching confirmation advances the parked batch; wrong content counts as
// a failure of the function. Confirmations nobody waits for are dropped with
// a log line: they cannot be refused after the fact (authz's confirm
// endpoint refuses them up front).
//
// The confirmer's identity is the body's By, which the processor trusts:
// nats.conf lets only authz, which stamps By with the caller named by the
// subject authz.<user>.confirm, and admin publish confirm.>.
func (c *confirmations) handle(ctx context.Context, m jetstream.Msg) {
	err := c.apply(ctx, m)
	switch {
	case err == nil:
		_ = m.Ack()
	case errors.Is(err, errDropConfirmation):
		c.log.Warn("confirmation dropped", "subject", m.Subject(), "reason", err)
		_ = m.Ack()
	case errors.Is(err, records.ErrDecode) || errors.Is(err, records.ErrVersion):
		// A record of the batch is unreadable: waiting cannot help. The
		// batch's token meets the same record and ends the batch visibly;
		// the parked function, unconfirmed, times out meanwhile.
		c.log.Error("confirmation dropped: a record of its batch is unreadable", "subject", logging.Capped(m.Subject()), "err", err)
		_ = m.Ack()
	default:
		n := 1
		if md, merr := jsapi.DeliveryOf(m.Reply()); merr == nil {
			n = int(md.NumDelivered)
		}
		if n >= maxConfirmDeliveries {
			c.log.Error("confirmation dropped: not applicable after repeated tries", "subject", logging.Capped(m.Subject()), "deliveries", n, "err", err)
			_ = m.Ack()
			return
		}
		if n == 1 {
			c.log.Warn("confirmation not applied yet; redelivered with backoff", "subject", logging.Capped(m.Subject()), "err", err)
		} else {
			c.log.Debug("confirmation not applied yet", "subject", logging.Capped(m.Subject()), "deliveries", n, "err", err)
		}
		_ = m.NakWithDelay(confirmRetryDelay(n, err))
	}
}

// maxConfirmDeliveries bounds how often a confirmation is tried before it
// is dropped with an error line: about ten minutes of backoff.
const maxConfirmDeliveries = 20

// confirmRetryDelay is the wait before delivery n+1: a lost write race
// retries at once, anything else backs off from conflictDelay to a minute.
func confirmRetryDelay(n int, err error) time.Duration {
	if errors.Is(err, streams.ErrConflict) && n < 5 {
		return conflictDelay
	}
	d := conflictDelay << min(n, 12)
	return min(d, time.Minute)
}

var errDropConfirmation = errors.New("confirmation not applicable")

// DecodeConfirmation reads a confirmation body: a msgpack Confirmation, or
// any other bytes taken as the content itself, with no identity (admin's
// `nats pub`, which only functions whose rule names no confirmer accept).
func DecodeConfirmation(body []byte) records.Confirmation {
	if c, err := records.Decode[records.Confirmation](body); err == nil {
		return c
	}
	return records.Confirmation{Content: string(body)}
}

// apply applies confirmation m; errDropConfirmation says it never will be.
func (c *confirmations) apply(ctx context.Context, m jetstream.Msg) error {
	_, id, index, err := streams.ParseConfirmSubject(m.Subject())
	if err != nil {
		return fmt.Errorf("%w: %w", errDropConfirmation, err)
	}
	conf := DecodeConfirmation(m.Data())
	b, err := c.steps.cache.get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("%w: unknown batch %d", errDropConfirmation, id)
	}
	if err != nil {
		return err
	}
	st, err := c.steps.load(ctx, id)
	if err != nil {
		return err
	}
	prog := &st.Progress
	if prog.State != records.Parked || prog.Parked.Index != index {
		return fmt.Errorf("%w: batch %d is not waiting for a confirmation of function %d (state %s)", errDropConfirmation, id, index, prog.State)
	}
	timer := prog.Parked.Timer
	if b.Functions[index].Inclusion != nil {
		err = c.steps.inc.confirm(ctx, b, st, index, conf)
	} else {
		spec := b.Functions[index].Confirm
		if len(spec.By) > 0 && !slices.Contains(spec.By, conf.By) {
			return fmt.Errorf("%w: %q may not confirm function %d of batch %d (allowed: %v)", errDropConfirmation, conf.By, index, id, spec.By)
		}
		if conf.Content == spec.Expect {
			_, err = c.steps.keep(ctx, b, st, index, prog.Parked.Output, nil)
		} else {
			_, err = c.steps.functionFailed(ctx, b, st, failure{index: index, msg: fmt.Sprintf("function %d: confirmation content %q does not match the expected %q", index, logging.Capped(conf.Content), logging.Capped(spec.Expect)), retryable: true, invalidated: true}, nil)
		}
	}
	if err == nil && timer != 0 {
		// The timeout no longer matters: retire its token. If this fails the
		// token fires later, finds itself stale and is dropped.
		if derr := c.streams[b.Priority].DeleteMsg(ctx, timer); derr != nil && !errors.Is(derr, jetstream.ErrMsgNotFound) {
			c.log.Debug("timer token not deleted", "batch_id", b.ID, "seq", timer, "err", derr)
		}
	}
	return err
}
