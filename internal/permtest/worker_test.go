package permtest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/internal/streams"
)

// TestWorker: workers answer work requests and keep their completion and
// run records; they touch neither the queues nor the processors' progress,
// and publish no callbacks.
func TestWorker(t *testing.T) {
	s := start(t)
	worker := s.serveWorker(t)
	proc := s.as(t, "processor")
	procConsumer := streams.ProcessorConsumer(domain)

	runBoundaries(t, []boundary{
		{
			name: "answers work requests but publishes no callbacks",
			allowed: func(t *testing.T) {
				proc.allowed(t, "be answered by a worker", proc.request(streams.WorkSubject("x"), "done"))
				admin := s.as(t, "admin")
				admin.allowed(t, "discover the worker service", func(ctx context.Context) error {
					_, err := admin.nc.RequestWithContext(ctx, "$SRV.PING."+streams.WorkerService, nil)
					return err
				})
			},
			denied: func(t *testing.T) {
				subj := streams.CallbackSubject(domain)
				s.deniedInto(t, worker, streams.StreamCallbacks, subj, worker.jsPublish(subj))
				worker.deniedPublish(t, subj)
			},
		},
		{
			name: "keeps results and runs but not progress",
			allowed: func(t *testing.T) {
				worker.allowed(t, "create, get and update a result", func(ctx context.Context) error {
					return createGetUpdate(ctx, worker.js, streams.BucketResults, streams.ResultKey(1, 0, 0))
				})
				worker.allowed(t, "create, get and update a run record", func(ctx context.Context) error {
					return createGetUpdate(ctx, worker.js, streams.BucketRuns, "run-1")
				})
			},
			denied: func(t *testing.T) {
				worker.denied(t, "$JS.API.STREAM.INFO."+kvStream(streams.BucketProgress), func(ctx context.Context) error {
					_, err := worker.js.KeyValue(ctx, streams.BucketProgress)
					return err
				})
				subj := kvSubject(streams.BucketProgress, streams.ProgressKey(domain, 1))
				s.deniedInto(t, worker, kvStream(streams.BucketProgress), subj, worker.jsPublish(subj))
			},
		},
		{
			name: "uses JetStream for its buckets only, not the queues",
			allowed: func(t *testing.T) {
				worker.allowed(t, "read account info", func(ctx context.Context) error {
					_, err := worker.js.AccountInfo(ctx)
					return err
				})
			},
			denied: func(t *testing.T) {
				s.adminPublish(t, highToken())
				before := s.msgs(t, streams.StreamHigh)
				worker.denied(t, "$JS.API.CONSUMER.INFO."+streams.StreamHigh+"."+procConsumer, func(ctx context.Context) error {
					_, err := worker.js.Consumer(ctx, streams.StreamHigh, procConsumer)
					return err
				})
				next := "$JS.API.CONSUMER.MSG.NEXT." + streams.StreamHigh + "." + procConsumer
				worker.denied(t, next, func(ctx context.Context) error {
					_, err := worker.nc.RequestWithContext(ctx, next, []byte(`{"batch":1,"no_wait":true}`))
					return err
				})
				if after := s.msgs(t, streams.StreamHigh); after != before {
					t.Errorf("HIGH went from %d to %d messages", before, after)
				}
			},
		},
		{
			name: "listens for work but not for ticks or callers",
			allowed: func(t *testing.T) {
				sub, err := worker.nc.SubscribeSync("work.>")
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = sub.Unsubscribe() }()
				if err := worker.nc.Flush(); err != nil {
					t.Fatal(err)
				}
				if err := proc.nc.PublishMsg(&nats.Msg{Subject: streams.FallbackSubject("x"), Data: []byte("f")}); err != nil {
					t.Fatal(err)
				}
				if _, err := sub.NextMsg(opWait); err != nil {
					t.Fatalf("worker received no work.> message: %v%s", err, worker.reported())
				}
			},
			denied: func(t *testing.T) {
				worker.deniedSubscribe(t, "tick.>")
				worker.deniedSubscribe(t, streams.AuthzSubject("*", ">"))
			},
		},
	})
}
