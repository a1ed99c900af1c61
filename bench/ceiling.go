package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// The ceiling's stream and consumer: a copy of HIGH's configuration on
// subjects of their own.
const (
	ceilingStream   = "CEILING"
	ceilingConsumer = "ceiling"
)

// ceilingPrefix is put in front of every subject of HIGH's configuration
// (stream subjects, consumer filters, token subjects) to make the ceiling's
// copy of it, so the ceiling follows whatever shape the queues have.
const ceilingPrefix = "ceiling."

// ceilingMsg is message i of the ceiling: a real tickflow token (same
// msgpack body, same headers, a unique Nats-Msg-Id), on the ceiling's copy
// of the subject authz publishes it on.
func ceilingMsg(id uint64) *nats.Msg {
	b := &pipeline.Batch{ID: id, Domain: benchDomain, Priority: pipeline.High, Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic}}
	m, err := streams.TokenMsg(ceilingPrefix+streams.TokenSubject(b.Priority, b.Domain), b, 0, 0)
	if err != nil {
		panic(err)
	}
	return m
}

// tokenSize returns the body and header sizes of a tickflow token as
// authz publishes it for batch id.
func tokenSize(id uint64) (body, header int) {
	b := &pipeline.Batch{ID: id, Domain: benchDomain, Priority: pipeline.High, Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic}}
	m, err := streams.TokenMsg(streams.TokenSubject(b.Priority, b.Domain), b, 0, 0)
	if err != nil {
		panic(err)
	}
	return len(m.Data), headerLen(m.Header)
}

// headerLen is the wire size of a header block (NATS/1.0 line, lines, blank line).
func headerLen(h nats.Header) int {
	n := len("NATS/1.0\r\n") + 2
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

func prefixed(subjects []string) []string {
	out := make([]string, len(subjects))
	for i, s := range subjects {
		out[i] = ceilingPrefix + s
	}
	return out
}

// ceilingResult is what runCeiling measured: messages a second, and the
// CPU-seconds the whole process (server included) spent per 1,000
// messages, publishing and consuming.
type ceilingResult struct {
	pubRate, consRate float64
	pubCPU, consCPU   float64
}

// runCeiling measures raw JetStream on the same server configuration: n
// token-sized messages published asynchronously to a work-queue stream on
// file storage, then consumed by a durable pull consumer acking each one.
func runCeiling(cfg *config, n int) (r ceilingResult, err error) {
	e, err := startEnv(cfg, false)
	if err != nil {
		return r, err
	}
	defer e.close()
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Minute)
	defer cancel()
	high := streams.Streams(e.settings)[0]
	sc := high
	sc.Name, sc.Description, sc.Subjects = ceilingStream, "bench ceiling", prefixed(high.Subjects)
	s, err := e.adminJS.CreateStream(ctx, sc)
	if err != nil {
		return r, err
	}
	cc := streams.DomainConsumers(e.settings, benchDomain)[0].Config
	cc.Durable, cc.Description = ceilingConsumer, "bench ceiling"
	cc.FilterSubjects = prefixed(cc.FilterSubjects)
	if cc.FilterSubject != "" {
		cc.FilterSubject = ceilingPrefix + cc.FilterSubject
	}
	cons, err := s.CreateConsumer(ctx, cc)
	if err != nil {
		return r, err
	}
	var pubErrs atomic.Int64
	js, err := jetstream.New(e.admin, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { pubErrs.Add(1) }))
	if err != nil {
		return r, err
	}
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		msgs[i] = ceilingMsg(uint64(i + 1))
	}
	start, cpu0 := time.Now(), selfBusy()
	for _, m := range msgs {
		if _, err := js.PublishMsgAsync(m); err != nil {
			return r, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return r, fmt.Errorf("ceiling: publish: %w", ctx.Err())
	}
	tpub, pubCPU := time.Since(start), selfBusy()-cpu0
	if k := pubErrs.Load(); k > 0 {
		return r, fmt.Errorf("ceiling: %d publishes failed", k)
	}

	var got atomic.Int64
	done := make(chan struct{})
	start, cpu0 = time.Now(), selfBusy()
	c, err := cons.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		if got.Add(1) == int64(n) {
			close(done)
		}
	})
	if err != nil {
		return r, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		c.Stop()
		return r, fmt.Errorf("ceiling: consume: %w after %d of %d", ctx.Err(), got.Load(), n)
	}
	// Acks are one-way: the run ends when the server has them all.
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			c.Stop()
			return r, err
		}
		if info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	tcons, consCPU := time.Since(start), selfBusy()-cpu0
	c.Stop()
	k := float64(n) / 1000
	return ceilingResult{pubRate: float64(n) / tpub.Seconds(), consRate: float64(n) / tcons.Seconds(),
		pubCPU: pubCPU / k, consCPU: consCPU / k}, nil
}
