package processor_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/submit"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/internal/testsystem"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// TestCluster runs the same code on a three-node cluster with R3 streams
// and buckets, and loses a node halfway: every batch still finishes once.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster takes a few seconds")
	}
	c := testnats.StartCluster(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := func(user string) *nats.Conn {
		cr := testnats.Creds(user)
		cr.URL = c.URLs()
		nc, err := streams.Connect(cr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	js := func(user string) jetstream.JetStream {
		j, err := jetstream.New(conn(user))
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	settings := streams.DefaultSettings()
	settings.Replicas, settings.AckWait = 3, 2*time.Second
	admin := js("admin")
	pctx, pcancel := context.WithTimeout(ctx, 90*time.Second)
	defer pcancel()
	// A just-formed cluster may still count a peer offline for placement
	// (no suitable peers, JetStream error 10005) until its first report
	// reaches the meta leader, and an API request made while the cluster
	// settles may go unanswered: provisioning (idempotent) is tried again,
	// each try bounded, until it takes.
	var perr error
	testnats.Eventually(t, 90*time.Second, "resources provisioned", func() bool {
		actx, acancel := context.WithTimeout(pctx, 15*time.Second)
		defer acancel()
		perr = streams.Provision(actx, admin, settings, domain)
		var apiErr *jetstream.APIError
		if errors.As(perr, &apiErr) && apiErr.ErrorCode == errCodeNoSuitablePeers || errors.Is(perr, context.DeadlineExceeded) && pctx.Err() == nil {
			t.Logf("provisioning tried again: %v", perr)
			return false
		}
		return true
	})
	if perr != nil {
		t.Fatal(perr)
	}
	info, err := admin.Stream(pctx, streams.StreamHigh)
	if err != nil {
		t.Fatal(err)
	}
	if ci := info.CachedInfo(); ci.Config.Replicas != 3 || ci.Cluster == nil || len(ci.Cluster.Replicas) != 2 {
		t.Fatalf("HIGH is not replicated three times: %+v", ci.Cluster)
	}

	var runs atomic.Int32
	mux := pipeline.NewServeMux()
	calls := counter{testsystem.Count(mux)}
	mux.Use(func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
			runs.Add(1)
			return next.Handle(ctx, call)
		})
	})
	handlers.Register(mux, handlers.NewLedger(nil), nil)
	w, err := worker.New(ctx, conn("worker"), mux, worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wdone := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	go func() { defer close(wdone); _ = w.Run(wctx) }()
	t.Cleanup(func() { wcancel(); testnats.Stopped(t, "worker", wdone) })
	p, err := processor.New(ctx, conn("processor"), processor.Options{Domain: domain, WorkTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	az := js("authz")
	var ids []uint64
	submit := func(n int) {
		for i := range n {
			b := pipeline.Batch{Domain: domain, Priority: pipeline.Med, Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic},
				Functions: []pipeline.Function{{Type: handlers.TypeNoop}}}
			if i%2 == 1 {
				b.Subroutine.Mode = pipeline.NonAtomic
				b.Functions = append(b.Functions, pipeline.Function{Type: handlers.TypeNoop})
			}
			// A client retries a submission that timed out during a
			// failover; its idempotency key makes the retry safe.
			idem := fmt.Sprintf("cluster-%d", len(ids))
			var id uint64
			var err error
			// A write during the client's reconnect fails at once (no
			// reconnect buffer): retry with a short backoff until the
			// deadline, as a client would.
			deadline := time.Now().Add(30 * time.Second)
			for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
				sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
				bt := b
				id, err = submit.Enqueue(sctx, az, &bt, idem, time.Now())
				scancel()
				if err == nil || time.Now().After(deadline) {
					break
				}
				select {
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				case <-time.After(backoff):
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
	}
	// finished counts the batches with a callback stored (alone or in a
	// group; one stored twice, after a publish whose PubAck was lost in
	// the failover, counts once).
	finished := func() int {
		fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
		defer fcancel()
		s, err := admin.Stream(fctx, streams.StreamCallbacks)
		if err != nil {
			return 0
		}
		st := s.CachedInfo().State
		done := map[uint64]bool{}
		for seq := st.FirstSeq; st.Msgs > 0 && seq <= st.LastSeq; seq++ {
			m, err := s.GetMsg(fctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return 0
			}
			cbs, _, err := records.DecodeCallbacks(m.Data)
			if err != nil {
				t.Fatal(err)
			}
			for _, cb := range cbs {
				done[cb.BatchID] = true
			}
		}
		return len(done)
	}
	drive := func(want int) {
		testnats.Eventually(t, 60*time.Second, "callbacks", func() bool {
			tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
			p.Tick(tctx, 8)
			tcancel()
			return finished() == want
		})
	}
	submit(10)
	drive(10)
	c.Servers[2].Close() // a node dies; its replicas and any leaders on it move
	submit(10)
	drive(20)
	for i, id := range ids {
		fns := 1 + i%2
		for f := range fns {
			if n := calls.get(key(id, f)); n != 1 {
				t.Fatalf("batch %d function %d ran %d times", id, f, n)
			}
		}
	}
	t.Logf("%d handler runs for %d batches on a cluster that lost a node", runs.Load(), len(ids))
}

// errCodeNoSuitablePeers is JetStream's "no suitable peers for placement".
const errCodeNoSuitablePeers jetstream.ErrorCode = 10005
