package testsystem

import (
	"fmt"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

const (
	// settleWait bounds the wait for a batch to finish while a test ticks.
	settleWait = 15 * time.Second
	// tickSteps is how many steps each of those ticks asks for.
	tickSteps = 8
)

// Enqueue submits bt the way authz does, without a submitter, and returns
// its id. The batch is taken as it is: the caller fills in its domain,
// priority and mode.
func (s *System) Enqueue(t testing.TB, bt *pipeline.Batch) uint64 {
	t.Helper()
	id, err := submit.Enqueue(s.Ctx, s.AuthzJS, bt, "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Callbacks returns every callback in CALLBACKS, by batch id.
func (s *System) Callbacks(t testing.TB) map[uint64][]records.Callback {
	t.Helper()
	return testnats.Callbacks(t, s.Admin)
}

// Callback returns batch id's first callback, and whether there is one.
func (s *System) Callback(t testing.TB, id uint64) (records.Callback, bool) {
	t.Helper()
	if cbs := s.Callbacks(t)[id]; len(cbs) > 0 {
		return cbs[0], true
	}
	return records.Callback{}, false
}

// Outcome ticks p until batch id's callback is in CALLBACKS, and returns it.
func (s *System) Outcome(t testing.TB, p *processor.Processor, id uint64) records.Callback {
	t.Helper()
	var cb records.Callback
	testnats.Eventually(t, settleWait, fmt.Sprintf("callback of batch %d", id), func() bool {
		var ok bool
		if cb, ok = s.Callback(t, id); ok {
			return true
		}
		p.Tick(s.Ctx, tickSteps)
		return false
	})
	return cb
}

// Record returns batch id's record as the owner reads it, asking again
// while authz is not serving (Retryable).
func (s *System) Record(t testing.TB, id uint64) *api.BatchRecord {
	t.Helper()
	var rep *api.BatchReply
	var err error
	testnats.Eventually(t, 10*time.Second, "authz answers batch", func() bool {
		rep, err = s.ownerClient(t).Batch(s.Ctx, api.IDRequest{ID: id})
		return !Retryable(err)
	})
	if err != nil {
		t.Fatalf("batch %d: %v", id, err)
	}
	return rep.Record
}

// Settled ticks p until batch id's record, as the owner reads it, is
// terminal, and returns it.
func (s *System) Settled(t testing.TB, p *processor.Processor, id uint64) *api.BatchRecord {
	t.Helper()
	var rec *api.BatchRecord
	testnats.Eventually(t, settleWait, fmt.Sprintf("batch %d settled", id), func() bool {
		if rec = s.Record(t, id); rec.Status.Terminal() {
			return true
		}
		p.Tick(s.Ctx, tickSteps)
		return false
	})
	return rec
}

// DeadLetters returns the DLQ's entries, in order.
func (s *System) DeadLetters(t testing.TB) []records.DeadLetter {
	t.Helper()
	return testnats.DeadLetters(t, s.Admin)
}

// Progress returns batch id's progress record in the first domain, and
// whether there is one.
func (s *System) Progress(t testing.TB, id uint64) (records.Progress, bool) {
	t.Helper()
	return testnats.Progress(t, s.Admin, s.Domains[0], id)
}
