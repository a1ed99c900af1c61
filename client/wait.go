package client

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
)

// waitRecheck is how long Wait trusts its subscription before it reads
// the batch again anyway: the announcement is a core NATS message, at most
// once, and one published while authz could not reach the server, or the
// client's connection was away, is not sent again.
const waitRecheck = 30 * time.Second

// waitLag is the first pause before Wait reads a batch again whose
// outcome was announced but whose record it read not terminal yet (a
// replica of the batches bucket behind its leader); it doubles each time,
// up to waitRecheck.
const waitLag = 10 * time.Millisecond

// Wait waits until batch id, one of the user's own, finished, and returns
// its reply: the record with its outcome and every function's output. It
// does not poll: it subscribes to the batch's OutcomeSubject, on which
// authz announces the outcome once the record holds it, and then reads
// the batch once, so an outcome that came before Wait is not missed. It
// reads the batch again after the connection reconnects, and every
// waitRecheck (30s) in case an announcement was lost. Wait returns when
// ctx is done (its error wraps ctx.Err()), or with the error of a read
// (ErrNotFound for a batch that is not the user's). Only a batch's
// submitter may wait for it: nats.conf lets each user hear only of its
// own outcomes (outcomes.<user>.>), so the owner reads others' with Batch.
func (c *Client) Wait(ctx context.Context, id uint64) (*api.BatchReply, error) {
	if id == 0 {
		return nil, invalid("wait", "id is 0; expected a batch id (from 1)")
	}
	heard := make(chan struct{}, 1)
	sub, err := c.nc.Subscribe(streams.OutcomeSubject(c.user, id), func(*nats.Msg) {
		select {
		case heard <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, fmt.Errorf("client: wait for batch %d: subscribe: %w", id, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	reconnected := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(reconnected)
	// The subscription was sent before this read on the same connection,
	// so the server holds it by the time authz reads the request.
	pause := waitRecheck
	for {
		rep, err := c.Batch(ctx, api.IDRequest{ID: id})
		if err != nil {
			return nil, err
		}
		if rep.Terminal() {
			return rep, nil
		}
		if rep.Record.Batch.Submitter != c.user {
			return nil, fmt.Errorf("%w: wait: batch %d is %s's; only its submitter hears of its outcome: read it with Batch",
				ErrInvalid, id, rep.Record.Batch.Submitter)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("client: wait for batch %d: %w", id, ctx.Err())
		case <-heard:
			// Announced: the record is terminal, though a read served by a
			// replica may not show it yet.
			pause = waitLag
		case <-reconnected:
		case <-t.C:
			pause = min(2*pause, waitRecheck)
		}
		t.Stop()
	}
}
