package authz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// keeper keeps a message that no consumer takes among the newest messages
// of each queue's stream, so that the stream's file does not empty after
// every token at moderate rates.
//
// nats-server's file store deletes a message block once its last message
// is removed, and when that block is the one being written it first
// creates a new block file and writes a tombstone into it. A queue's
// processors keep up with it, so at a moderate rate the queue empties after
// nearly every token: every acknowledgement cost a file created, a
// tombstone written and a file removed. A block that holds a live keeper
// never empties.
//
// The keeper goes on KeeperSubject(p), which is outside every token
// subject: no consumer, listing or count of a domain sees it. It carries a
// time to live, so keepers replaced (or left by an authz that died) go by
// themselves, and it is replaced once the stream has taken span messages
// since (the block being written fills and a new one starts at 4 MiB, some
// 13,000 tokens), or once it is refresh old while tokens still come. An
// idle queue's keeper is not replaced: it expires, and the next look after
// a token places another.
type keeper struct {
	js      jetstream.JetStream
	queues  map[pipeline.Priority]jetstream.Stream
	log     *slog.Logger
	every   time.Duration // how often it looks at the streams
	span    uint64        // messages a stream takes before a new keeper
	ttl     time.Duration // a keeper's time to live
	refresh time.Duration // age at which a keeper is replaced while tokens come
	maxWait time.Duration // the longest wait between looks, after failures
	placed  map[pipeline.Priority]placedKeeper
}

// placedKeeper is the keeper a keeper placed last on a stream.
type placedKeeper struct {
	seq uint64
	at  time.Time
}

// Keeper defaults: a look a second, a new keeper every 1,024 messages or 10
// seconds, each living 30 seconds.
const (
	keeperEvery   = time.Second
	keeperSpan    = 1024
	keeperTTL     = 30 * time.Second
	keeperRefresh = 10 * time.Second
	// keeperMaxWait bounds the wait between looks after failures.
	keeperMaxWait = time.Minute
	// keeperWarnAfter is the failures in a row that are logged.
	keeperWarnAfter = 3
	// keeperRequestTimeout bounds each of a look's requests.
	keeperRequestTimeout = 2 * time.Second
)

func newKeeper(js jetstream.JetStream, queues map[pipeline.Priority]jetstream.Stream, log *slog.Logger) *keeper {
	return &keeper{js: js, queues: queues, log: log, every: keeperEvery, span: keeperSpan, ttl: keeperTTL,
		refresh: keeperRefresh, maxWait: keeperMaxWait, placed: map[pipeline.Priority]placedKeeper{}}
}

// run looks at the streams every k.every until ctx is done. A look that
// fails is tried again later, waiting twice as long after each failure in a
// row up to k.maxWait; the third failure in a row is logged once, as a
// warning. A missing keeper costs only the churn it saves.
func (k *keeper) run(ctx context.Context) error {
	wait, failed := k.every, 0
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var errs []error
		for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
			if st := k.queues[p]; st != nil {
				if err := k.keep(ctx, p, st); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", streams.QueueStream(p), err))
				}
			}
		}
		switch err := errors.Join(errs...); {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			if failed >= keeperWarnAfter {
				k.log.Info("queue keepers placed again")
			}
			wait, failed = k.every, 0
		default:
			if failed++; failed == keeperWarnAfter {
				k.log.Warn("queue keepers not placed; the queues work without them, at the cost of a file replaced after most tokens "+
					"(provision again so that each queue's stream takes its keeper's subject, and let authz publish keep.> in nats.conf)",
					"err", err)
			}
			wait = min(2*wait, k.maxWait)
		}
		t.Reset(wait)
	}
}

// keep places a new keeper on queue p's stream st when the one placed last
// may no longer be among its newest messages.
func (k *keeper) keep(ctx context.Context, p pipeline.Priority, st jetstream.Stream) error {
	lctx, cancel := context.WithTimeout(ctx, keeperRequestTimeout)
	defer cancel()
	info, err := st.Info(lctx)
	if err != nil {
		return err
	}
	last, pl, now := info.State.LastSeq, k.placed[p], time.Now()
	switch {
	case pl.seq == 0: // none placed yet
	case last <= pl.seq: // nothing came since (or the stream was made again): nothing to keep
		if last < pl.seq {
			delete(k.placed, p)
		}
		return nil
	case last-pl.seq < k.span && now.Sub(pl.at) < k.refresh:
		return nil
	}
	m := nats.NewMsg(streams.KeeperSubject(p))
	streams.SetTTL(m, k.ttl)
	ack, err := k.js.PublishMsg(lctx, m)
	if err != nil {
		return err
	}
	k.placed[p] = placedKeeper{seq: ack.Sequence, at: now}
	return nil
}
