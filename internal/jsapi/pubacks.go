package jsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// AckPublisher publishes messages to JetStream streams without waiting for
// their PubAcks, and hands each PubAck to whoever waits for it
// (PendingAck): several writes are pipelined instead of waiting a round
// trip each, as with jetstream.JetStream.PublishMsgAsync, at a fraction of
// its cost per message. The PubAck is read without reflection (the
// server's success answer has one fixed shape; anything else is decoded
// in full), each message costs one small allocation and one channel, and
// no timer runs unless someone waits for an answer not yet there.
//
// Every PendingAck must be waited for (Wait, or Done and then Result or
// Forget): an answer that never comes is forgotten only by its waiter.
// A PubAck that does not arrive within the publisher's timeout counts as
// not stored (ErrPubAckTimeout); the write may still have been stored, as
// with any lost answer. It is safe for concurrent use.
type AckPublisher struct {
	nc      *nats.Conn
	prefix  string
	timeout time.Duration
	sub     *nats.Subscription

	mu      sync.Mutex
	next    uint64
	pending map[uint64]*PendingAck
}

// NewAckPublisher subscribes to the PubAcks of nc's writes (one wildcard
// inbox subscription, which lasts as long as the connection); timeout
// bounds each wait for a PubAck.
func NewAckPublisher(nc *nats.Conn, timeout time.Duration) (*AckPublisher, error) {
	p := &AckPublisher{nc: nc, prefix: nc.NewInbox() + ".", timeout: timeout, pending: map[uint64]*PendingAck{}}
	sub, err := nc.Subscribe(p.prefix+"*", p.handle)
	if err != nil {
		return nil, fmt.Errorf("jsapi: subscribe to PubAcks: %w", err)
	}
	p.sub = sub
	return p, nil
}

// PendingAck is the PubAck of one message published by an AckPublisher.
type PendingAck struct {
	p        *AckPublisher
	id       uint64
	deadline time.Time
	done     chan struct{}
	// raw says the answer is kept whole (Request) rather than read as a
	// PubAck.
	raw bool
	// ack, msg and err are written once, before done is closed.
	ack PubAck
	msg *nats.Msg
	err error
}

// Publish publishes m, which must have no reply subject, and returns its
// pending PubAck. It sets m's reply subject to where the PubAck comes: m
// is the publisher's from then on. An error says m was not sent.
func (p *AckPublisher) Publish(m *nats.Msg) (*PendingAck, error) {
	return p.send(m, false)
}

// Request publishes m, a request to JetStream's API such as a direct get
// (KVGetMsg), and returns its pending answer, kept whole: Msg gives
// it once Done is closed. Like Publish, it pipelines: several requests are
// answered in one round trip instead of one each.
func (p *AckPublisher) Request(m *nats.Msg) (*PendingAck, error) {
	return p.send(m, true)
}

func (p *AckPublisher) send(m *nats.Msg, raw bool) (*PendingAck, error) {
	if m.Reply != "" {
		return nil, jetstream.ErrAsyncPublishReplySubjectSet
	}
	a := &PendingAck{p: p, done: make(chan struct{}), deadline: time.Now().Add(p.timeout), raw: raw}
	p.mu.Lock()
	p.next++
	a.id = p.next
	p.pending[a.id] = a
	p.mu.Unlock()
	m.Reply = p.prefix + strconv.FormatUint(a.id, 10)
	err := p.nc.PublishMsg(m)
	if err != nil {
		p.forget(a.id)
		return nil, err
	}
	return a, nil
}

// handle resolves the PendingAck a PubAck answers; an answer nobody waits
// for any more is dropped.
func (p *AckPublisher) handle(m *nats.Msg) {
	if len(m.Subject) <= len(p.prefix) {
		return
	}
	id, err := strconv.ParseUint(m.Subject[len(p.prefix):], 10, 64)
	if err != nil {
		return
	}
	p.mu.Lock()
	a := p.pending[id]
	delete(p.pending, id)
	p.mu.Unlock()
	if a == nil {
		return
	}
	if a.raw {
		a.msg = m
	} else {
		a.ack, a.err = ReadPubAck(m)
	}
	close(a.done)
}

func (p *AckPublisher) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

// Done is closed once the PubAck has arrived (then Result gives it).
func (a *PendingAck) Done() <-chan struct{} { return a.done }

// Deadline is when a wait for the PubAck gives up.
func (a *PendingAck) Deadline() time.Time { return a.deadline }

// Result is the stream sequence of the stored message (a KV write's
// revision), or why it was not stored. Call it once Done is closed.
func (a *PendingAck) Result() (uint64, error) { return a.ack.Seq, a.err }

// Msg is the answer to a Request, whole. Call it once Done is closed.
func (a *PendingAck) Msg() *nats.Msg { return a.msg }

// PubAck is the whole answer (the sequence, and whether the message was a
// duplicate), or why the message was not stored. Call it once Done is
// closed.
func (a *PendingAck) PubAck() (PubAck, error) { return a.ack, a.err }

// Forget gives up waiting for the PubAck: its answer, if it comes, is dropped.
func (a *PendingAck) Forget() { a.p.forget(a.id) }

// Wait waits for the PubAck and returns Result: the stream sequence, or
// why the message was not stored. When ctx ends first it gives up with
// ctx's error, and a ctx without a deadline is bounded by the publisher's
// timeout (an error matching ErrPubAckTimeout). Waiting for many PubAcks,
// one ctx with a deadline for all costs less than a timer each.
func (a *PendingAck) Wait(ctx context.Context) (uint64, error) {
	ack, err := a.WaitPubAck(ctx)
	return ack.Seq, err
}

// WaitPubAck is Wait that returns the whole answer (PubAck).
func (a *PendingAck) WaitPubAck(ctx context.Context) (PubAck, error) {
	select {
	case <-a.done:
		return a.ack, a.err
	default:
	}
	if _, ok := ctx.Deadline(); ok {
		select {
		case <-a.done:
			return a.ack, a.err
		case <-ctx.Done():
			a.Forget()
			return PubAck{}, ctx.Err()
		}
	}
	t := time.NewTimer(time.Until(a.deadline))
	defer t.Stop()
	select {
	case <-a.done:
		return a.ack, a.err
	case <-t.C:
		a.Forget()
		return PubAck{}, fmt.Errorf("%w (%s)", ErrPubAckTimeout, a.p.timeout)
	case <-ctx.Done():
		a.Forget()
		return PubAck{}, ctx.Err()
	}
}

// PubAck is what a stream answered to a stored message.
type PubAck struct {
	// Seq is the stored message's stream sequence (a KV write's revision).
	Seq uint64
	// Duplicate says the message was a duplicate within the stream's
	// window: Seq is the first copy's.
	Duplicate bool
}

// The frame of the server's answer for a stored message, written from one
// template: {"stream":"NAME"[,"domain":"D"],"seq":N[,"duplicate": true]}.
var (
	pubAckPrefix = []byte(`{"stream":"`)
	pubAckDomain = []byte(`,"domain":"`)
	pubAckSeq    = []byte(`,"seq":`)
	pubAckEnd    = []byte(`}`)
	pubAckDup    = []byte(`,"duplicate": true}`)
	pubAckDup2   = []byte(`,"duplicate":true}`)
)

// ReadPubAck reads the server's answer to a JetStream publish: the stored
// message's sequence, or the error the stream answered (a
// *jetstream.APIError, as jetstream's own publishes return it),
// jetstream.ErrNoStreamResponse when no stream took the subject, or
// jetstream.ErrInvalidJSAck for anything else. The server's success answer
// is read without reflection; any other shape (an error, a batch's answer)
// is decoded in full.
func ReadPubAck(m *nats.Msg) (PubAck, error) {
	d := m.Data
	if len(d) == 0 {
		if m.Header.Get("Status") == "503" {
			return PubAck{}, jetstream.ErrNoStreamResponse
		}
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	if a, ok := readPubAckTemplate(d); ok {
		return a, nil
	}
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Seq       uint64              `json:"seq"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(d, &r); err != nil {
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return PubAck{}, r.Error
	}
	if r.Stream == "" {
		return PubAck{}, jetstream.ErrInvalidJSAck
	}
	return PubAck{Seq: r.Seq, Duplicate: r.Duplicate}, nil
}

// readPubAckTemplate reads a success answer of the server's template; ok
// is false for any other shape.
func readPubAckTemplate(d []byte) (a PubAck, ok bool) {
	r, ok := quoted(d, pubAckPrefix)
	if !ok {
		return a, false
	}
	if bytes.HasPrefix(r, pubAckDomain) {
		if r, ok = quoted(r, pubAckDomain); !ok {
			return a, false
		}
	}
	if !bytes.HasPrefix(r, pubAckSeq) {
		return a, false
	}
	r = r[len(pubAckSeq):]
	n := 0
	for n < len(r) && r[n] >= '0' && r[n] <= '9' {
		n++
	}
	if a.Seq, ok = parseDigits(r[:n]); !ok {
		return a, false
	}
	switch r = r[n:]; {
	case bytes.Equal(r, pubAckEnd):
	case bytes.Equal(r, pubAckDup), bytes.Equal(r, pubAckDup2):
		a.Duplicate = true
	default:
		return a, false
	}
	return a, true
}

// quoted skips prefix and the non-empty string without escapes it opens,
// closing quote included, and returns what follows.
func quoted(d, prefix []byte) ([]byte, bool) {
	if !bytes.HasPrefix(d, prefix) {
		return nil, false
	}
	r := d[len(prefix):]
	end := bytes.IndexByte(r, '"')
	if end <= 0 || bytes.IndexByte(r[:end], '\\') >= 0 {
		return nil, false
	}
	return r[end+1:], true
}

// parseDigits reads a decimal uint64 of digits only.
func parseDigits(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false // overflows a uint64
		}
		n = n*10 + d
	}
	return n, true
}
