package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// claimGrace is how long past its caller's deadline a call's claim holds
// before the record window starts: a handler that honours its context has
// returned by then.
const claimGrace = 2 * time.Second

// kvTimeout bounds one request to the results bucket.
const kvTimeout = 2 * time.Second

// once runs a function at most once per completion key. It first claims the
// key (a create in the results bucket, so only one worker runs it at a
// time), runs fn, and turns the claim into the completion record before
// answering; a repeated call is answered from the record, a concurrent one
// is told the call is busy, and a claim whose holder died expires. A failed
// run releases the claim: failures leave no record, so a retry runs again.
//
// The record is what answers a call whose reply was lost, so once keeps
// trying to write it, across reconnects and server restarts, until the
// claim's Until: the claim covers that time, so no other worker takes the
// call over while its record is pending.
func (w *Worker) once(ctx context.Context, req *records.WorkRequest, key string, fn func() *records.WorkReply) *records.WorkReply {
	until, claim, rep := w.claimFor(ctx)
	if rep != nil {
		return rep
	}
	rev, fresh, rep := w.claim(ctx, key, claim)
	if rep != nil {
		return rep
	}
	rep = fn()
	done, rep := w.completion(ctx, req, key, rev, until, rep)
	if done == nil {
		return rep
	}
	if w.record(ctx, key, done, rev, until) {
		rep.Fresh = fresh
	}
	return rep
}

// claimFor is the claim a call under ctx writes, and until, when it ends:
// the call's deadline plus a grace period and the record window.
func (w *Worker) claimFor(ctx context.Context) (until time.Time, claim []byte, rep *records.WorkReply) {
	until = w.claimUntil(ctx)
	claim, err := records.Encode(&records.Completion{Running: true, Until: until, Worker: w.opts.Name})
	if err != nil {
		return until, nil, unavailable(err)
	}
	return until, claim, nil
}

// claimUntil is when the claim of a call under ctx ends: the call's
// deadline plus a grace period and the record window.
func (w *Worker) claimUntil(ctx context.Context) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(w.opts.Timeout)
	}
	return deadline.Add(claimGrace + w.opts.RecordWindow)
}

// completion turns the reply of a run under the claim at rev into the
// completion record to write. A failed run releases the claim, and so does
// one whose outputs no record can keep (a permanent failure, so nothing
// runs it again); done is then nil and rep the reply to give.
func (w *Worker) completion(ctx context.Context, req *records.WorkRequest, key string, rev uint64, until time.Time, rep *records.WorkReply) (done []byte, _ *records.WorkReply) {
	if rep.Error != nil {
		w.release(ctx, key, rev, until)
		return nil, rep
	}
	done, fail := w.recordOf(req, key, rep.Outputs)
	if fail != nil {
		w.release(ctx, key, rev, until)
		return nil, fail
	}
	return done, rep
}

// recordOf is the completion record of a call of req that ran with
// outputs, as stored under its own key; or, when nothing can keep the
// outputs (the effect happened, but no record fits max_payload), the
// permanent failure to answer instead, logged under key.
func (w *Worker) recordOf(req *records.WorkRequest, key string, outputs []pipeline.Output) ([]byte, *records.WorkReply) {
	done, err := records.Encode(&records.Completion{Outputs: outputs, Worker: w.opts.Name})
	if err == nil && len(done) > w.maxRecord() {
		err = fmt.Errorf("%w: the outputs take %d bytes encoded; the server's max_payload of %d bytes leaves room for %d",
			ErrOutputTooLarge, len(done), w.nc.MaxPayload(), w.maxRecord())
	}
	if err == nil {
		return done, nil
	}
	w.log.Error("completion record cannot be written", "key", key, "err", err)
	index := 0
	if n := len(req.Calls); n > 0 {
		index = req.Calls[n-1].Index
	}
	return nil, failure(req, index, pipeline.Permanent(err))
}

// claim takes the completion key for this worker. It returns the claim's
// revision and whether the key was fresh (never held before), or the reply
// for a call that must not run here: its record, busy, or unavailable.
func (w *Worker) claim(ctx context.Context, key string, claim []byte) (uint64, bool, *records.WorkReply) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*kvTimeout)
	defer cancel()
	// A key nobody ever held: the common case, one round trip. A key with
	// any history (a released claim, a record) fails the expectation.
	rev, err := w.writeKV(cctx, key, claim, 0)
	if err == nil {
		return rev, true, nil
	}
	return w.contested(cctx, key, claim, err)
}

// contested is claim after the first write, expecting a key nobody ever
// held, failed with err: a key with history is taken when it is free (or
// its claim expired), answered from its record, or found busy.
func (w *Worker) contested(cctx context.Context, key string, claim []byte, err error) (uint64, bool, *records.WorkReply) {
	if !jsapi.IsRevisionConflict(err) {
		return 0, false, unavailable(fmt.Errorf("worker: claim %s: %w", key, err))
	}
	var rev uint64
	for attempt := 0; ; attempt++ {
		if rev, err = w.results.Create(cctx, key, claim); err == nil {
			return rev, false, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) || attempt == 3 {
			return 0, false, unavailable(fmt.Errorf("worker: claim %s: %w", key, err))
		}
		e, err := w.results.Get(cctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // released meanwhile
		}
		if err != nil {
			return 0, false, unavailable(fmt.Errorf("worker: read %s: %w", key, err))
		}
		if rep := answer(key, e.Value()); rep != nil {
			return 0, false, rep
		}
		// The holder died (or overran its claim): take the claim over.
		c, _ := records.Decode[records.Completion](e.Value())
		if rev, err = w.results.Update(cctx, key, claim, e.Revision()); err == nil {
			w.log.Warn("expired claim taken over", "key", key, "holder", c.Worker)
			return rev, false, nil
		}
	}
}

// answer is the reply a completion key's value gives without running
// anything: the record's outputs, busy while a live claim holds it, or
// unavailable for a value that does not decode. It returns nil for an
// expired claim, which may be taken over.
func answer(key string, value []byte) *records.WorkReply {
	c, err := records.Decode[records.Completion](value)
	if err != nil {
		return unavailable(fmt.Errorf("worker: completion record %s: %w", key, err))
	}
	if !c.Running {
		return &records.WorkReply{Outputs: c.Outputs, Recorded: true}
	}
	if time.Now().Before(c.Until) {
		return busy(fmt.Sprintf("worker: %s is running on %s until %s", key, c.Worker, c.Until.Format(time.RFC3339Nano)))
	}
	return nil
}

// lookup answers a call from its completion key alone, without a handler
// slot: from the record, or busy while a live claim holds it. It returns
// nil when the call has to run (no record, an expired claim) or the bucket
// could not be read.
func (w *Worker) lookup(ctx context.Context, key string, deadline time.Time) *records.WorkReply {
	gctx, cancel := context.WithTimeout(ctx, min(kvTimeout, time.Until(deadline)/2))
	defer cancel()
	e, err := w.results.Get(gctx, key)
	if err != nil {
		return nil
	}
	return answer(key, e.Value())
}

// record turns the claim at rev into the completion record done, trying
// again with backoff (each try bounded, so a reconnect or a restarted
// server is waited out) until it is written or a little past until, the
// claim's end (trying on past it is harmless: the write is a
// compare-and-set on the claim, which fails once another worker took the
// call over). It reports whether this call's record is the one in the bucket.
func (w *Worker) record(ctx context.Context, key string, done []byte, rev uint64, until time.Time) bool {
	return w.retry(ctx, key, "completion record", until.Add(claimGrace), func(ctx context.Context) (bool, error) {
		err := w.writeRecord(ctx, key, done, rev)
		if err == nil {
			return true, nil
		}
		if !jsapi.IsRevisionConflict(err) {
			return false, err
		}
		// An earlier try may have been written with its reply lost; or the
		// claim was lost, or taken over after it expired.
		e, gerr := w.results.Get(ctx, key)
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
			var opts []jetstream.KVCreateOpt
			if w.recordTTL > 0 {
				opts = append(opts, jetstream.KeyTTL(w.recordTTL))
			}
			if _, cerr := w.results.Create(ctx, key, done, opts...); cerr != nil {
				return false, cerr
			}
			return true, nil
		case gerr != nil:
			return false, gerr
		case bytes.Equal(e.Value(), done):
			return true, nil
		}
		w.log.Error("completion record not written: the call's claim was taken over; its handler may have run twice", "key", key)
		return false, errGaveUp
	})
}

// writeKV writes value under key of the results bucket with
// compare-and-set on revision rev (0: a key nobody ever held), as
// jetstream.KeyValue.Update does, through the worker's AckPublisher, which
// reads the answer for less; a lost race matches jsapi.IsRevisionConflict.
func (w *Worker) writeKV(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	a, err := w.pub.Publish(jsapi.KVUpdateMsg(streams.BucketResults, key, value, rev))
	if err != nil {
		return 0, err
	}
	return a.Wait(ctx)
}

// recordMsg is the write of completion record done under key with
// compare-and-set on rev (0: a key never written, or deleted), with the
// record's time to live: the server removes it RecordTTL after this write,
// since the key's last write decides.
func (w *Worker) recordMsg(key string, done []byte, rev uint64) *nats.Msg {
	m := jsapi.KVUpdateMsg(streams.BucketResults, key, done, rev)
	if w.recordTTL > 0 {
		streams.SetTTL(m, w.recordTTL)
	}
	return m
}

// writeRecord writes completion record done under key (recordMsg) and
// waits for its answer.
func (w *Worker) writeRecord(ctx context.Context, key string, done []byte, rev uint64) error {
	a, err := w.pub.Publish(w.recordMsg(key, done, rev))
	if err != nil {
		return err
	}
	_, err = a.Wait(ctx)
	return err
}

// release deletes the claim at rev after a failed run, so a retry runs
// again at once. If it cannot, the claim expires at until.
func (w *Worker) release(ctx context.Context, key string, rev uint64, until time.Time) {
	w.retry(ctx, key, "claim release", until, func(ctx context.Context) (bool, error) {
		err := w.results.Delete(ctx, key, jetstream.LastRevision(rev))
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			return false, errGaveUp // no longer ours
		}
		return err == nil, err
	})
}

// errGaveUp stops retry without another try.
var errGaveUp = errors.New("worker: no point trying again")

// retry runs write until it reports done, fails with errGaveUp, or until
// passes, waiting between tries with exponential backoff. The writes
// outlive ctx on purpose: shutdown drains them.
func (w *Worker) retry(ctx context.Context, key, what string, until time.Time, write func(context.Context) (bool, error)) bool {
	ctx = context.WithoutCancel(ctx)
	delay := 50 * time.Millisecond
	for try := 1; ; try++ {
		wctx, cancel := context.WithTimeout(ctx, kvTimeout)
		done, err := write(wctx)
		cancel()
		if done {
			if try > 1 {
				w.log.Info(what+" written after retries", "key", key, "tries", try)
			}
			return true
		}
		if errors.Is(err, errGaveUp) {
			return false
		}
		if time.Now().Add(delay).After(until) {
			w.log.Error(what+" not written; gave up", "key", key, "tries", try, "err", err)
			return false
		}
		if try == 1 {
			w.log.Warn(what+" not written yet; trying again until it is", "key", key, "until", until, "err", err)
		}
		t := time.NewTimer(delay)
		<-t.C
		delay = min(2*delay, time.Second)
	}
}

// maxRecord is the largest completion record (and reply) the server takes,
// with room for headers.
func (w *Worker) maxRecord() int {
	return int(w.nc.MaxPayload()) - recordHeadroom
}

// recordHeadroom is kept free of a record's maximum size for headers.
const recordHeadroom = 4 << 10

// unavailable is a reply for a call that could not be attempted; the
// processor retries it without counting an attempt.
func unavailable(err error) *records.WorkReply {
	return busy(err.Error())
}

// busy is a reply for a call that was not attempted: running elsewhere,
// no handler slot free, or its record unreadable. The processor retries it
// later without counting an attempt.
func busy(msg string) *records.WorkReply {
	return &records.WorkReply{Error: &records.WorkError{Message: msg, Busy: true, Retryable: true}}
}
