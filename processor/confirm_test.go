package processor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

func confirmed(timeout time.Duration, times int) pipeline.Function {
	f := noop()
	f.Confirm = &pipeline.Confirmation{Expect: "included", Timeout: pipeline.Duration(timeout)}
	if times > 0 {
		f.Retry = retry(times, 10*time.Millisecond)
	}
	return f
}

// runConfirmations serves the CONFIRM consumer until the test ends.
func runProcessor(t *testing.T, b *bundle, p *processor.Processor) {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	t.Cleanup(func() { cancel(); testnats.Stopped(t, "processor", done) })
}

func TestConfirmation(t *testing.T) {
	tests := []struct {
		name     string
		confirm  []string // contents published, in order
		timeout  time.Duration
		times    int
		want     pipeline.Outcome
		runsOf0  int
		parkedAt int
	}{
		{name: "right content advances", confirm: []string{"included"}, timeout: time.Minute, want: pipeline.Outcome{Status: pipeline.Executed, Executed: 2}, runsOf0: 1},
		{name: "wrong content is a failure", confirm: []string{"reverted"}, timeout: time.Minute, want: pipeline.Outcome{Status: pipeline.Rejected}, runsOf0: 1},
		{name: "wrong then right after a retry", confirm: []string{"reverted", "included"}, timeout: time.Minute, times: 1, want: pipeline.Outcome{Status: pipeline.Executed, Executed: 2}, runsOf0: 2},
		{name: "no confirmation in time", timeout: 1100 * time.Millisecond, want: pipeline.Outcome{Status: pipeline.Rejected}, runsOf0: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			p := b.processor(t, processor.Options{})
			runProcessor(t, b, p)
			id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
				Functions: []pipeline.Function{confirmed(tt.timeout, tt.times), noop()}})
			// authz relays confirmations; nobody else may publish them.
			js := b.env.JS(t, "authz")
			for i, content := range tt.confirm {
				// Execute (again) until parked, then confirm.
				testnats.Eventually(t, 10*time.Second, "batch parked", func() bool {
					p.Tick(b.ctx, 1)
					pr, ok := b.tryProgress(t, id)
					return ok && pr.State == records.Parked && runsOf(b, id, 0) == i+1
				})
				if _, err := js.Publish(b.ctx, streams.ConfirmSubject(domain, id, 0), []byte(content)); err != nil {
					t.Fatal(err)
				}
			}
			cb := b.outcome(t, p, id)
			if cb.Outcome.Status != tt.want.Status || cb.Outcome.Executed != tt.want.Executed {
				t.Fatalf("outcome %s, want %s", cb.Outcome, tt.want)
			}
			if got := runsOf(b, id, 0); got != tt.runsOf0 {
				t.Fatalf("function 0 ran %d times, want %d", got, tt.runsOf0)
			}
			// Each round asks for the effect anew, under its own key.
			for r := range tt.runsOf0 {
				if got := b.calls.get(roundKey(id, 0, r)); got != 1 {
					t.Fatalf("round %d of function 0 ran %d times under its key, want 1", r, got)
				}
			}
			if tt.timeout == time.Minute {
				// The confirmation retired the timer token: nothing waits out the minute.
				testnats.Eventually(t, 5*time.Second, "queues empty", func() bool { return b.queued(t) == 0 })
			}
		})
	}
}

func TestConfirmationsWaitForAProcessor(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions: []pipeline.Function{confirmed(time.Minute, 0)}})
	if sr := step(t, b.ctx, p); sr.Action != api.ActionParked {
		t.Fatalf("step: %+v", sr)
	}
	// Nobody consumes confirmations yet: the CONFIRM stream keeps it.
	if _, err := b.env.JS(t, "authz").Publish(b.ctx, streams.ConfirmSubject(domain, id, 0), []byte("included")); err != nil {
		t.Fatal(err)
	}
	runProcessor(t, b, p)
	if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s", cb.Outcome)
	}
}

func TestConfirmationByIdentity(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	f := confirmed(time.Minute, 0)
	f.Confirm.By = []string{"oracle"}
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic}, Functions: []pipeline.Function{f}})
	step(t, b.ctx, p)
	// A confirmation that does not say who sent it is refused; a confirmation
	// from the allowed identity (as authz forwards it) is applied.
	js := b.env.JS(t, "authz")
	if _, err := js.Publish(b.ctx, streams.ConfirmSubject(domain, id, 0), []byte("included")); err != nil {
		t.Fatal(err)
	}
	data, _ := records.Encode(&records.Confirmation{Content: "included", By: "oracle"})
	runProcessor(t, b, p)
	testnats.Eventually(t, 5*time.Second, "anonymous confirmation consumed", func() bool {
		info, err := b.env.JS(t, "admin").Stream(b.ctx, streams.StreamConfirm)
		return err == nil && info.CachedInfo().State.Msgs == 0
	})
	if pr := b.progress(t, id); pr.State != records.Parked {
		t.Fatalf("an anonymous confirmation was applied: %+v", pr)
	}
	if _, err := js.Publish(b.ctx, streams.ConfirmSubject(domain, id, 0), data); err != nil {
		t.Fatal(err)
	}
	if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome %s", cb.Outcome)
	}
}

func TestConfirmationRefusedForOthers(t *testing.T) {
	b := setup(t)
	errs := make(chan error, 4)
	nc := b.env.Conn(t, "alice", natsErrorHandler(errs))
	if err := nc.Publish(streams.ConfirmSubject(domain, 1, 0), []byte("included")); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-errs:
		if err == nil {
			t.Fatal("want a permissions violation")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("alice confirmed without a permissions violation")
	}
}

func TestPause(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	id := b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}})
	set := func(paused bool) { b.setPaused(t, paused) }
	set(true)
	if rep := p.Tick(b.ctx, 5); rep.Status != api.TickPaused || len(rep.Steps) != 0 {
		t.Fatalf("paused tick: %+v", rep)
	}
	if b.calls.total() != 0 {
		t.Fatal("executed while paused")
	}
	set(false)
	if cb := b.outcome(t, p, id); cb.Outcome.Status != pipeline.Executed {
		t.Fatalf("outcome after resume %s", cb.Outcome)
	}
}

func TestTickOverNATS(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	runProcessor(t, b, p)
	ids := []uint64{
		b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}}),
		b.enqueue(t, pipeline.Batch{Functions: []pipeline.Function{noop()}}),
	}
	nc := b.env.Conn(t, "ticker")
	var rep api.TickReport
	testnats.Eventually(t, 5*time.Second, "processor answers ticks", func() bool {
		m, err := nc.Request(streams.TickSubject(domain), []byte("2"), 500*time.Millisecond)
		if err != nil {
			return false
		}
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			t.Fatal(err)
		}
		return true
	})
	if rep.Status != api.TickOK || len(rep.Steps) != 2 {
		t.Fatalf("report %+v", rep)
	}
	cbs := b.callbacks(t)
	for _, id := range ids {
		if len(cbs[id]) != 1 {
			t.Fatalf("batch %d: %d callbacks", id, len(cbs[id]))
		}
	}
	m, err := nc.Request(streams.TickSubject(domain), []byte("{\"steps\": 0}"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) == "" || json.Unmarshal(m.Data, &map[string]any{}) != nil {
		t.Fatalf("bad tick answer %q", m.Data)
	}
	var bad map[string]string
	_ = json.Unmarshal(m.Data, &bad)
	if bad["error"] == "" {
		t.Fatalf("a tick asking for 0 steps must be refused with an error, got %s", m.Data)
	}
	_ = handlers.TypeNoop
}

// TestConfirmationWithAnUnreadableRecord: a confirmation whose batch's
// progress record does not decode is dropped once, with an error line,
// never redelivered in a loop.
func TestConfirmationWithAnUnreadableRecord(t *testing.T) {
	b := setup(t)
	p := b.processor(t, processor.Options{})
	id := b.enqueue(t, pipeline.Batch{Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic},
		Functions: []pipeline.Function{confirmed(time.Minute, 0)}})
	if sr := step(t, b.ctx, p); sr.Action != api.ActionParked {
		t.Fatalf("step: %+v", sr)
	}
	if _, err := b.env.JS(t, "admin").Publish(b.ctx, "$KV."+streams.BucketProgress+"."+streams.ProgressKey(domain, id), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	data, _ := records.Encode(&records.Confirmation{Content: "included"})
	if _, err := b.env.JS(t, "authz").Publish(b.ctx, streams.ConfirmSubject(domain, id, 0), data); err != nil {
		t.Fatal(err)
	}
	runProcessor(t, b, p)
	admin := b.env.JS(t, "admin")
	testnats.Eventually(t, 5*time.Second, "the confirmation consumed", func() bool {
		s, err := admin.Stream(b.ctx, streams.StreamConfirm)
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
	c, err := admin.Consumer(b.ctx, streams.StreamConfirm, streams.ProcessorConsumer(domain))
	if err != nil {
		t.Fatal(err)
	}
	if info := c.CachedInfo(); info.NumRedelivered != 0 || info.Delivered.Consumer != 1 {
		t.Fatalf("the confirmation was delivered %d times (%d redelivered), want once", info.Delivered.Consumer, info.NumRedelivered)
	}
}
