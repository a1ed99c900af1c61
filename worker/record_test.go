package worker_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// outage is how long the server stays down in TestRecordSurvivesServerRestart:
// longer than a worker once kept trying to write a completion record.
const outage = 6 * time.Second

// TestRecordSurvivesServerRestart: the server dies while a handler runs, so
// its completion record cannot be written when it returns, and its reply
// is lost. The worker keeps trying until the server is back, and meanwhile
// its claim does not expire: the repeated call is answered from the record
// (busy until then) and the handler runs once. So for a function's call
// under its own key, and for an atomic unit in its unit group.
func TestRecordSurvivesServerRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subject string
		req     *records.WorkRequest
	}{
		{name: "function", subject: streams.WorkSubject("effect"), req: fnReq(1, "effect", 0)},
		{name: "unit", subject: streams.WorkUnitSubject, req: &records.WorkRequest{BatchID: 1, Domain: "pay", Attempt: 1, Unit: true,
			Calls: []records.WorkCall{{Index: 0, Type: "effect"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) { recordSurvivesServerRestart(t, tc.subject, tc.req) })
	}
}

func recordSurvivesServerRestart(t *testing.T, subject string, req *records.WorkRequest) {
	dir := t.TempDir()
	conf := testnats.ConfigPath(t)
	srv, err := embedded.Start(embedded.Options{ConfigFile: conf, DataDir: dir, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	listen := "127.0.0.1:" + strconv.Itoa(srv.Addr().(*net.TCPAddr).Port)
	url := srv.URL()
	connect := func(user string) *nats.Conn {
		c := testnats.Creds(user)
		c.URL = url
		nc, err := streams.Connect(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	ctx := testnats.Context(t, 30*time.Second)
	admin := connect("admin")
	js, err := jetstreamFor(admin)
	if err != nil {
		t.Fatal(err)
	}
	if err := streams.Provision(ctx, js, streams.DefaultSettings(), "pay"); err != nil {
		t.Fatal(err)
	}

	started, release := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("effect", func(context.Context, *pipeline.Call) (pipeline.Result, error) {
		if runs.Add(1) == 1 {
			close(started)
		}
		<-release
		return pipeline.Result{Data: pipeline.MustPayload("done")}, nil
	})
	serveOn(t, connect("worker"), admin, mux, worker.Options{})
	proc := connect("processor")

	first := make(chan error, 1)
	go func() {
		_, err := request(proc, subject, req, time.Second)
		first <- err
	}()
	<-started
	srv.Close() // the server dies while the handler runs
	close(release)
	if err := <-first; err == nil {
		t.Fatal("the first call was answered although the server was down")
	}
	<-time.After(outage) // the outage itself: nothing to wait for
	srv, err = embedded.Start(embedded.Options{ConfigFile: conf, DataDir: dir, Listen: listen})
	if err != nil {
		t.Fatal(err)
	}

	var rep *records.WorkReply
	testnats.Eventually(t, 20*time.Second, "the repeated call answered from the record", func() bool {
		r, err := request(proc, subject, req, time.Second)
		if err != nil || (r.Error != nil && r.Error.Busy) {
			return false // reconnecting, or the record is still on its way
		}
		rep = r
		return true
	})
	if rep.Error != nil || !rep.Recorded || len(rep.Outputs) != 1 {
		t.Fatalf("repeated call: %+v", rep)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
}

// request sends a work request as the processor would and decodes the reply.
func request(nc *nats.Conn, subject string, req *records.WorkRequest, deadline time.Duration) (*records.WorkReply, error) {
	data, err := records.Encode(req)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(streams.HeaderDeadline, itoa(time.Now().Add(deadline).UnixNano()))
	resp, err := nc.RequestMsg(m, deadline)
	if err != nil {
		return nil, err
	}
	rep, err := records.Decode[records.WorkReply](resp.Data)
	if err != nil {
		return nil, err
	}
	return &rep, nil
}
