package processor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// partsDomain is the domain the tests of the processor's parts provision.
const partsDomain = "pay"

// parts is a real server with partsDomain provisioned, for a test that
// builds one part of the processor alone: the connection the part uses
// (as the processor), and admin's, to read back what it wrote.
type parts struct {
	env   *testnats.Env
	ctx   context.Context
	nc    *nats.Conn          // as the processor
	js    jetstream.JetStream // as the processor
	admin jetstream.JetStream
}

// startParts starts the server, provisioned with settings applied.
func startParts(t *testing.T, settings ...func(*streams.Settings)) *parts {
	t.Helper()
	env := testnats.Start(t, []string{partsDomain}, testnats.WithSettings(func(s *streams.Settings) {
		for _, f := range settings {
			f(s)
		}
	}))
	p := &parts{env: env, ctx: testnats.Context(t, 60*time.Second), nc: env.Conn(t, "processor"), admin: env.JS(t, "admin")}
	js, err := jetstream.New(p.nc)
	if err != nil {
		t.Fatal(err)
	}
	p.js = js
	return p
}

// acks is a publisher of asynchronous writes on the processor's
// connection, as the processor makes it.
func (p *parts) acks(t *testing.T) *jsapi.AckPublisher {
	t.Helper()
	a, err := jsapi.NewAckPublisher(p.nc, pubAckTimeout)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// stored returns every message in stream, in order, with its headers,
// read as admin.
func (p *parts) stored(t *testing.T, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := p.admin.Stream(p.ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(p.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(p.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// limitMsgSize makes stream refuse messages larger than n bytes.
func (p *parts) limitMsgSize(t *testing.T, stream string, n int) {
	t.Helper()
	s, err := p.admin.Stream(p.ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = int32(n)
	if _, err := p.admin.UpdateStream(p.ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// workAnswer is what a worker answers a request with: body, or a micro
// error when code is set; nothing at all when silent.
type workAnswer struct {
	body       []byte
	code, desc string
	silent     bool
}

// serve answers the requests on subject with what answer says, through
// streams.Reply as a worker does, on a connection as nats.conf's worker,
// until the test ends.
func (p *parts) serve(t *testing.T, subject string, answer func(m *nats.Msg) workAnswer) {
	t.Helper()
	nc := p.env.Conn(t, "worker")
	_, err := nc.Subscribe(subject, func(m *nats.Msg) {
		a := answer(m)
		if a.silent {
			return
		}
		if err := streams.Reply(nc, m.Reply, a.body, a.code, a.desc); err != nil {
			t.Errorf("answer on %s: %v", subject, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// must is v, for a call that cannot fail here (encoding a record), from
// any goroutine.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// batchOf is a one-function batch of partsDomain on the HIGH queue.
func batchOf(id uint64) *pipeline.Batch {
	return &pipeline.Batch{
		ID: id, Domain: partsDomain, Priority: pipeline.High, Key: "k",
		Functions: []pipeline.Function{{Type: "noop"}},
	}
}

// take publishes a token of b to its queue and takes it from the
// processors' consumer: the delivered message a step works on.
func (p *parts) take(t *testing.T, b *pipeline.Batch) jetstream.Msg {
	t.Helper()
	m, err := streams.TokenMsg(streams.RequeueSubject(b.Priority, b.Domain), b, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.js.PublishMsg(p.ctx, m); err != nil {
		t.Fatal(err)
	}
	return p.next(t, b.Priority)
}

// next takes the next token of prio's queue from the processors'
// consumer, waiting up to a few seconds.
func (p *parts) next(t *testing.T, prio pipeline.Priority) jetstream.Msg {
	t.Helper()
	cons, err := p.js.Consumer(p.ctx, streams.QueueStream(prio), streams.ProcessorConsumer(partsDomain))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range msgs.Messages() {
		return m
	}
	t.Fatalf("no token on %s: %v", streams.QueueStream(prio), msgs.Error())
	return nil
}

// callbackMsg is the terminal callback message of batch id (Executed),
// as a step hands it over.
func callbackMsg(t *testing.T, id uint64) *nats.Msg {
	t.Helper()
	m, err := streams.CallbackMsg(&records.Callback{
		BatchID: id, Domain: partsDomain, Priority: pipeline.High,
		Outcome: pipeline.Outcome{Status: pipeline.Executed, Executed: 1}, Attempts: 1,
		At: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), Processor: "p1",
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
