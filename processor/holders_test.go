package processor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// TestConcurrentHoldersKeepProgressConsistent: two processors hold the same
// token at once, both as its first delivery (a server that lost its
// consumer's delivery state hands it out twice). A's call fails and it
// records the failure; B's call, the retry, succeeds and B finishes the
// batch. In either order of A's failure record and B's finish, no progress
// record is left that contradicts the terminal outcome.
func TestConcurrentHoldersKeepProgressConsistent(t *testing.T) {
	tests := []struct {
		name  string
		pause string // where A stops while B runs
	}{
		{name: "A's failure recorded before B finishes", pause: processor.FaultAfterProgress},
		{name: "B finishes before A records its failure", pause: processor.FaultAfterWork},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := setup(t)
			var runs atomic.Int32
			b.mux.RegisterFunc("fails.once", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
				if runs.Add(1) == 1 {
					return pipeline.Result{}, errors.New("first run fails")
				}
				return pipeline.Result{Data: pipeline.MustPayload("ok")}, nil
			})
			paused, resume := make(chan struct{}), make(chan struct{})
			var once sync.Once
			pA := b.processor(t, processor.WithFault(processor.Options{Name: "A"}, func(point string) error {
				if point == tt.pause {
					once.Do(func() { close(paused); <-resume })
				}
				return nil
			}))
			pB := b.processor(t, processor.Options{Name: "B"})
			id := b.enqueue(t, pipeline.Batch{
				Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic, Retry: retry(3, 10*time.Millisecond)},
				Functions:  []pipeline.Function{{Type: "fails.once"}},
			})
			med, err := b.admin.Stream(b.ctx, streams.StreamMed)
			if err != nil {
				t.Fatal(err)
			}
			info, err := med.Info(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			seqA := info.State.LastSeq // the token A takes
			aDone := make(chan api.StepReport, 1)
			go func() {
				for b.ctx.Err() == nil {
					if rep := pA.Tick(b.ctx, 1); len(rep.Steps) == 1 {
						aDone <- rep.Steps[0]
						return
					}
				}
			}()
			<-paused
			// The same token again, as a first delivery, to B.
			raw, err := med.GetMsg(b.ctx, seqA)
			if err != nil {
				t.Fatal(err)
			}
			dup := nats.NewMsg(raw.Subject)
			dup.Data = raw.Data
			if _, err := b.admin.PublishMsg(b.ctx, dup); err != nil {
				t.Fatal(err)
			}
			srB := step(t, b.ctx, pB)
			close(resume)
			srA := <-aDone
			// Both deliveries were one message: once one side acknowledged
			// it, nothing brings A's copy back.
			if err := med.DeleteMsg(b.ctx, seqA); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
				t.Fatal(err)
			}
			testnats.Eventually(t, 15*time.Second, "the batch finished and the queues drained", func() bool {
				pB.Tick(b.ctx, 8)
				return len(b.callbacks(t)[id]) > 0 && b.queued(t) == 0
			})
			cbs := b.callbacks(t)[id]
			if len(cbs) != 1 || cbs[0].Outcome.Status != pipeline.Executed {
				t.Fatalf("callbacks %+v (A %+v, B %+v)", cbs, srA, srB)
			}
			if pr, ok := b.tryProgress(t, id); ok && (pr.State != records.Done || pr.Outcome == nil || pr.Outcome.Status != pipeline.Executed) {
				t.Fatalf("progress %+v left beside the terminal outcome %s (A %+v, B %+v)", pr, cbs[0].Outcome, srA, srB)
			}
		})
	}
}
