package processor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/senderlease"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// A batch with a function that needs a sender holds one sender of its
// domain's pool from its first step until it is terminal (the pool record
// in the senders bucket, senderlease.Acquire). Every step asks for the
// lease again, which finds the one the batch holds by its id, whichever
// replica took it before whatever crash; only a batch that holds none
// leases a free one, and with none free, or with its submitter holding
// its share of the pool (Options.SenderShare) already, it is set aside for
// Options.SenderWait without holding up the batches behind it. The sender
// is released where terminal outcomes are applied (authz's callbacks) and,
// sooner, by the processor that finishes the batch; both are idempotent.

// senderPool leases the senders of the domain's pool to its batches and
// remembers the leases this replica knows of.
type senderPool struct {
	kv     jetstream.KeyValue // the senders bucket
	names  []string           // the pool (Options.Senders)
	limit  int                // Options.SenderShare; 0: the default
	holder string             // this replica (Options.Name)
	now    func() time.Time
	log    *slog.Logger
	leases leases
}

// leases remembers, per batch, the sender it holds: a lease only ends when
// its batch is terminal, and a terminal batch takes no more steps, so a
// remembered lease is never stale.
type leases struct {
	mu sync.Mutex
	m  map[uint64]string
}

func (l *leases) get(id uint64) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[id]
	return s, ok
}

func (l *leases) put(id uint64, sender string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[uint64]string{}
	}
	if len(l.m) >= cacheSize {
		for k := range l.m {
			delete(l.m, k)
			break
		}
	}
	l.m[id] = sender
}

func (l *leases) forget(id uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, id)
}

// lease returns the sender batch b holds, leasing a free one if it holds
// none; "" for a batch that needs none. leased says this replica did not
// know of the lease before. With every sender leased to other batches it
// returns senderlease.ErrNoSender.
func (sp *senderPool) lease(ctx context.Context, b *pipeline.Batch) (name string, leased bool, err error) {
	if !b.NeedsSender() {
		return "", false, nil
	}
	if name, ok := sp.leases.get(b.ID); ok {
		return name, false, nil
	}
	l := senderlease.Lease{Domain: b.Domain, Batch: b.ID, Key: b.Key, Processor: sp.holder, Submitter: b.Submitter, Share: sp.share()}
	name, err = senderlease.Acquire(ctx, sp.kv, l, sp.names, sp.now())
	if err != nil {
		return "", false, err
	}
	sp.leases.put(b.ID, name)
	return name, true, nil
}

// share is how many senders of the pool one submitter's batches may
// hold at once (Options.SenderShare); 0: no bound.
func (sp *senderPool) share() int {
	switch n := len(sp.names); {
	case sp.limit > 0:
		return sp.limit
	case n > 1:
		return n - 1
	}
	return 0
}

// needSender gives the step the sender its batch holds (st.sender). done
// says the step ends here: set aside until a sender is free, finished
// failed for a domain that has no senders at all, or dropped for a batch
// that finished meanwhile.
func (s *stepper) needSender(ctx context.Context, b *pipeline.Batch, st *state, m jetstream.Msg) (act api.Action, done bool, err error) {
	name, leased, err := s.senders.lease(ctx, b)
	switch {
	case err == nil && leased:
		// Authz may have removed the batch (a cancel) after this step read
		// its progress, or, on a first step, without the step reading it
		// at all: then the sender authz freed with the callback is leased
		// again, and the batch must neither run nor keep it.
		cur, lerr := s.load(ctx, b.ID)
		switch {
		case lerr != nil:
			s.senders.leases.forget(b.ID) // checked again at the next step
			return "", true, lerr
		case cur.State == records.Done:
			return api.ActionStale, true, s.announce(ctx, b, &cur.Progress, m, false)
		case cur.Rev != st.Rev:
			s.senders.leases.forget(b.ID)
			return "", true, fmt.Errorf("%w: batch %d moved while it leased a sender", streams.ErrConflict, b.ID)
		}
		st.sender = name
		return "", false, nil
	case err == nil:
		st.sender = name
		return "", false, nil
	case errors.Is(err, senderlease.ErrNoSender) && len(s.opts.Senders) == 0:
		msg := fmt.Sprintf("function %d needs a sender, and domain %s has none configured", st.Progress.Next, b.Domain)
		s.log.Error("batch needs a sender; none configured", "batch_id", b.ID)
		st.noWait = true // nothing to wait for
		act, err = s.settle(ctx, b, st, failure{index: st.Progress.Next, msg: msg}, m)
		return act, true, err
	case errors.Is(err, senderlease.ErrNoSender):
		s.log.Debug("every sender leased; batch set aside", "batch_id", b.ID, "wait", s.opts.SenderWait)
		return api.ActionSetAside, true, m.NakWithDelay(s.opts.SenderWait)
	case errors.Is(err, senderlease.ErrShare):
		s.log.Debug("submitter holds its share of the senders; batch set aside", "batch_id", b.ID, "submitter", logging.Capped(b.Submitter), "share", s.senders.share(), "wait", s.opts.SenderWait)
		return api.ActionSetAside, true, m.NakWithDelay(s.opts.SenderWait)
	}
	return "", true, err
}

// release frees the sender a finished batch held. authz releases it
// too when it applies the callback, durably; this is only sooner.
func (sp *senderPool) release(ctx context.Context, b *pipeline.Batch) {
	if !b.NeedsSender() {
		return
	}
	sp.leases.forget(b.ID)
	if name, err := senderlease.Release(ctx, sp.kv, b.Domain, b.ID, sp.now()); err != nil {
		sp.log.Warn("sender not released; authz releases it with the callback", "batch_id", b.ID, "err", err)
	} else if name != "" {
		sp.log.Debug("sender released", "batch_id", b.ID, "sender", name)
	}
}
