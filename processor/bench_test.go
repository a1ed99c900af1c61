package processor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// benchEnv is a real in-process server with a worker serving the no-op
// handler and a processor of the domain that nothing ticks but the benchmark.
type benchEnv struct {
	env   *testnats.Env
	ctx   context.Context
	authz jetstream.JetStream
	admin jetstream.JetStream
	p     *processor.Processor
}

func benchSetup(b *testing.B, opts processor.Options) *benchEnv {
	b.Helper()
	env := testnats.Start(b, []string{domain})
	ctx, cancel := context.WithCancel(context.Background())
	mux := pipeline.NewServeMux()
	mux.RegisterFunc(handlers.TypeNoop, func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{}, nil
	})
	w, err := worker.New(ctx, env.Conn(b, "worker"), mux, worker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = w.Run(ctx) }()
	b.Cleanup(func() { cancel(); testnats.Stopped(b, "worker", done) })
	admin := env.Conn(b, "admin")
	testnats.Eventually(b, 5*time.Second, "worker endpoints", func() bool {
		_, err := admin.Request("$SRV.PING.worker", nil, 100*time.Millisecond)
		return err == nil
	})
	opts.Domain = domain
	p, err := processor.New(ctx, env.Conn(b, "processor"), opts)
	if err != nil {
		b.Fatal(err)
	}
	return &benchEnv{env: env, ctx: ctx, authz: env.JS(b, "authz"), admin: env.JS(b, "admin"), p: p}
}

// enqueueNoops queues n atomic no-op batches the way authz does, from a few
// goroutines, and waits until the processors' consumer sees them all.
func (e *benchEnv) enqueueNoops(b *testing.B, n int) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	per := (n + 7) / 8
	for g := range 8 {
		wg.Go(func() {
			for i := g * per; i < min(n, (g+1)*per); i++ {
				bt := pipeline.Batch{Domain: domain, Priority: pipeline.High, Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic},
					Functions: []pipeline.Function{noop()}}
				if _, err := submit.Enqueue(e.ctx, e.authz, &bt, "", time.Now()); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	c, err := e.admin.Consumer(e.ctx, streams.StreamHigh, streams.ProcessorConsumer(domain))
	if err != nil {
		b.Fatal(err)
	}
	testnats.Eventually(b, 30*time.Second, "tokens visible to the consumer", func() bool {
		info, err := c.Info(e.ctx)
		return err == nil && info.NumPending >= uint64(n)
	})
}

// BenchmarkTickEmpty is a tick that finds both queues empty: the pause
// check and a no-wait fetch on HIGH and on MED.
func BenchmarkTickEmpty(b *testing.B) {
	e := benchSetup(b, processor.Options{})
	b.ReportAllocs()
	for b.Loop() {
		if rep := e.p.Tick(e.ctx, 1); rep.Status != api.TickNoMessages {
			b.Fatalf("status %q", rep.Status)
		}
	}
}

// BenchmarkTickNoopAtomic is one tick of one step: a no-op atomic batch
// run from its token to its terminal callback (fetch, record, progress,
// worker unit, progress, callback, ack), the path of every batch at a
// moderate rate; cpu-µs/op is the whole process's CPU a step.
func BenchmarkTickNoopAtomic(b *testing.B) {
	e := benchSetup(b, processor.Options{Concurrency: 1})
	e.enqueueNoops(b, b.N+10)
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU(b)
	for range b.N {
		rep := e.p.Tick(e.ctx, 1)
		if len(rep.Steps) != 1 || rep.Steps[0].Action != api.ActionFinished {
			b.Fatalf("tick: %+v", rep)
		}
	}
	b.ReportMetric(float64((processCPU(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkTickNoopAtomic32 is ticks of 32 steps run 32 at once, the
// default concurrency; ns/op is per step, and cpu-µs/op the CPU time the
// whole process (server, worker and processor together) spends per step:
// on a shared machine that figure moves less with other load than the wall
// time does.
func BenchmarkTickNoopAtomic32(b *testing.B) {
	const steps = 32
	e := benchSetup(b, processor.Options{Concurrency: steps, MaxSteps: steps})
	e.enqueueNoops(b, b.N+steps)
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU(b)
	for done := 0; done < b.N; {
		rep := e.p.Tick(e.ctx, min(steps, b.N-done))
		if len(rep.Steps) == 0 {
			b.Fatalf("tick: %+v", rep)
		}
		for _, s := range rep.Steps {
			if s.Action != api.ActionFinished {
				b.Fatalf("step: %+v", s)
			}
		}
		done += len(rep.Steps)
	}
	b.ReportMetric(float64((processCPU(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
}
