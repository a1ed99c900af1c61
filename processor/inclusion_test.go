package processor_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// txRef is the dispatch reference the dispatcher returns for an attempt.
func txRef(id uint64, attempt int) string { return fmt.Sprintf("tx-%d-%d", id, attempt) }

// confirmDispatch publishes, as authz does, a confirmation of function 0
// of batch id about the dispatch of attempt.
func confirmDispatch(t *testing.T, b *bundle, id uint64, content string, attempt int) {
	t.Helper()
	data, err := records.Encode(&records.Confirmation{Content: content, By: "oracle", Ref: txRef(id, attempt)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.authz.Publish(b.ctx, streams.ConfirmSubject(domain, id, 0), data); err != nil {
		t.Fatal(err)
	}
}

// confirmationsConsumed waits until the processor consumed every
// confirmation published so far.
func confirmationsConsumed(t *testing.T, b *bundle) {
	t.Helper()
	admin := b.env.JS(t, "admin")
	testnats.Eventually(t, 5*time.Second, "confirmations consumed", func() bool {
		s, err := admin.Stream(b.ctx, streams.StreamConfirm)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
}

// A confirmation names the dispatch it is about: one about the first
// round's dispatch that arrives after the second round parked (a late
// duplicate, or an oracle that lagged) is dropped, whatever it says, and
// the second round's own confirmation settles it.
func TestLateConfirmationOfAnEarlierDispatchIsDropped(t *testing.T) {
	for _, late := range []string{pipeline.ConfirmFailed + ": reverted", pipeline.ConfirmIncluded} {
		t.Run(late, func(t *testing.T) {
			b, d := setupSequencer(t)
			p := b.processor(t, processor.Options{Senders: []string{"s1"}})
			runProcessor(t, b, p)
			id := b.enqueueKeyed(t, "k", dispatch(0, time.Minute, 1), noop())
			testnats.Eventually(t, 10*time.Second, "first dispatch parked", func() bool {
				p.Tick(b.ctx, 1)
				return parked(t, b, id)
			})
			confirmDispatch(t, b, id, pipeline.ConfirmFailed+": fee too low", 1)
			testnats.Eventually(t, 10*time.Second, "second dispatch parked", func() bool {
				p.Tick(b.ctx, 1)
				a, _, _, _ := d.counts(id)
				return len(a) == 2 && parked(t, b, id)
			})
			confirmDispatch(t, b, id, late, 1)
			confirmationsConsumed(t, b)
			pr := b.progress(t, id)
			if pr.State != records.Parked || pr.Parked.Output.Ref != txRef(id, 2) || pr.Parked.Included || pr.FailuresOf(0) != 1 {
				t.Fatalf("a late confirmation of the first dispatch was applied to the second: %+v", pr)
			}
			if _, _, success, failure := d.counts(id); success != 0 || failure != 0 {
				t.Fatalf("hooks ran: success %d, failure %d", success, failure)
			}
			confirmDispatch(t, b, id, pipeline.ConfirmIncluded, 2)
			if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Executed {
				t.Fatalf("outcome %s, want executed", cb.Outcome)
			}
			d.mu.Lock()
			included := fmt.Sprint(d.included[id])
			d.mu.Unlock()
			if attempts, _, _, failure := d.counts(id); fmt.Sprint(attempts) != "[1 2]" || included != fmt.Sprint([]string{txRef(id, 2)}) || failure != 0 {
				t.Fatalf("dispatches %v, success hook for %s, failure hook %d; want [1 2], the second dispatch, none", attempts, included, failure)
			}
		})
	}
}

// The success hook runs only once the inclusion is saved: a poll that finds
// the first dispatch included while a failed confirmation of it wins the
// race to the progress record calls no hook for it, and the second round's
// inclusion calls the hook, for the second dispatch.
func TestSuccessHookOnlyAfterTheInclusionIsSaved(t *testing.T) {
	b, d := setupSequencer(t)
	p := b.processor(t, processor.Options{Senders: []string{"s1"}})
	runProcessor(t, b, p)
	kv := b.progressKV(t)
	var raced atomic.Bool
	// The first poll of the first dispatch lets a failed confirmation of it
	// be applied first, then answers "included".
	d.setVerdict(func(id uint64, attempt int, ref string) (bool, error) {
		if attempt > 1 {
			return true, nil
		}
		if !raced.CompareAndSwap(false, true) {
			return false, nil
		}
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		defer cancel()
		w, err := kv.Watch(ctx, streams.ProgressKey(domain, id))
		if err != nil {
			return false, err
		}
		defer func() { _ = w.Stop() }()
		data, err := records.Encode(&records.Confirmation{Content: pipeline.ConfirmFailed + ": dropped", By: "oracle", Ref: ref})
		if err != nil {
			return false, err
		}
		if _, err := b.authz.Publish(ctx, streams.ConfirmSubject(domain, id, 0), data); err != nil {
			return false, err
		}
		for {
			select {
			case e := <-w.Updates():
				if e == nil {
					continue // the end of the initial values
				}
				if pr, err := records.Decode[records.Progress](e.Value()); err == nil && pr.RoundOf(0) == 1 {
					return true, nil
				}
			case <-ctx.Done():
				return false, errors.New("the failed confirmation was not applied")
			}
		}
	})
	id := b.enqueueKeyed(t, "k", dispatch(10*time.Millisecond, time.Minute, 1))
	if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s, want executed", cb.Outcome)
	}
	if !raced.Load() {
		t.Fatal("the race was not staged")
	}
	d.mu.Lock()
	included := fmt.Sprint(d.included[id])
	d.mu.Unlock()
	attempts, _, _, _ := d.counts(id)
	if fmt.Sprint(attempts) != "[1 2]" || included != fmt.Sprint([]string{txRef(id, 2)}) {
		t.Fatalf("dispatches %v, success hook called for %s; want [1 2] and once, for the second dispatch", attempts, included)
	}
}

// A processor that dies after saving the inclusion, before the success
// hook, leaves a record its successor finishes from: the hook runs once and
// the batch moves on, even though the deadline passed and a poll would no
// longer say "included".
func TestSavedInclusionSurvivesACrashBeforeTheHook(t *testing.T) {
	b, d := setupSequencer(t)
	var polls atomic.Int32
	d.setVerdict(func(uint64, int, string) (bool, error) {
		return polls.Add(1) == 1, nil // included once, then never again
	})
	var seen, crashed atomic.Int32
	nc := b.env.Conn(t, "processor")
	first, err := processor.New(b.ctx, nc, withDomain(processor.WithFault(processor.Options{Name: "doomed", Senders: []string{"s1"}}, func(point string) error {
		// The first progress write parks the dispatch; the second saves its inclusion.
		if point == processor.FaultAfterProgress && seen.Add(1) == 2 {
			crashed.Add(1)
			return errors.New("killed")
		}
		return nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	id := b.enqueueKeyed(t, "k", dispatch(10*time.Millisecond, 300*time.Millisecond, 0), noop())
	testnats.Eventually(t, 10*time.Second, "the crash", func() bool {
		first.Tick(b.ctx, 1)
		return crashed.Load() == 1
	})
	if pr := b.progress(t, id); pr.State != records.Parked || !pr.Parked.Included {
		t.Fatalf("progress after the crash %+v, want parked and included", pr)
	}
	if _, _, success, _ := d.counts(id); success != 0 {
		t.Fatalf("success hook ran %d times before the crash point", success)
	}
	nc.Close()
	second := b.processor(t, processor.Options{Name: "successor", Senders: []string{"s1"}})
	if cb := b.outcome(t, second, id); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s, want executed", cb.Outcome)
	}
	if attempts, _, success, failure := d.counts(id); len(attempts) != 1 || success != 1 || failure != 0 {
		t.Fatalf("dispatches %v, success hook %d, failure hook %d; want one dispatch and one success hook", attempts, success, failure)
	}
}
