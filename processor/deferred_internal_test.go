package processor

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/jsapi"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// refusedCallback is batch id's callback with a header the stream
// refuses it for: the server answers its publish with an error.
func refusedCallback(t *testing.T, id uint64) *nats.Msg {
	t.Helper()
	m := callbackMsg(t, id)
	m.Header.Set(jetstream.ExpectedStreamHeader, "NOT_CALLBACKS")
	return m
}

// queued is the batch ids of the tokens in HIGH, in order.
func (p *parts) queued(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, m := range p.stored(t, streams.StreamHigh) {
		ids = append(ids, m.Header.Get(streams.HeaderBatchID))
	}
	return ids
}

// storedCallbacks is the batch ids of the callbacks in CALLBACKS, in order.
func storedCallbacks(t *testing.T, p *parts) []uint64 {
	t.Helper()
	var ids []uint64
	for _, m := range callbackMessages(t, p) {
		ids = append(ids, m.ids...)
	}
	return ids
}

// redelivered takes the next token of HIGH and checks it is batch id's,
// delivered a second time.
func (p *parts) redelivered(t *testing.T, id string) {
	t.Helper()
	m := p.next(t, pipeline.High)
	md, err := m.Metadata()
	if err != nil || md.NumDelivered != 2 || m.Headers().Get(streams.HeaderBatchID) != id {
		t.Fatalf("next token: batch %s, %+v, %v; want batch %s delivered again", m.Headers().Get(streams.HeaderBatchID), md, err, id)
	}
}

// TestThenAck: a write and the acknowledgement of its token. A token not
// taken by a tick is acknowledged right after its write is stored; one
// taken by a tick (deferred) only by the acker, once the PubAck came.
// A write refused, or a crash after it, leaves the token unacknowledged.
func TestThenAck(t *testing.T) {
	p := startParts(t)
	crashAt := ""
	pb := newPublisher(t, p, func(point string) error {
		if point == crashAt {
			return errors.New("crash")
		}
		return nil
	})

	plain := p.take(t, batchOf(1))
	if err := pb.thenAck(p.ctx, callbackMsg(t, 1), plain, "callback", faultAfterCallback); err != nil {
		t.Fatal(err)
	}
	if err := pb.thenAck(p.ctx, callbackMsg(t, 2), nil, "confirmation", faultAfterCallback); err != nil {
		t.Fatal(err)
	}
	refused := p.take(t, batchOf(3))
	if err := pb.thenAck(p.ctx, refusedCallback(t, 3), refused, "callback", faultAfterCallback); err == nil || !strings.Contains(err.Error(), "processor: callback") {
		t.Fatalf("a refused write: %v, want the stream's error", err)
	}
	crashAt = faultAfterRequeue
	crashed := p.take(t, batchOf(4))
	if err := pb.thenAck(p.ctx, callbackMsg(t, 4), crashed, "requeue", faultAfterRequeue); !errors.Is(err, errCrash) {
		t.Fatalf("a crash after the write: %v, want errCrash", err)
	}
	crashAt = faultAfterCallback
	d := &deferred{Msg: p.take(t, batchOf(5))}
	if err := pb.thenAck(p.ctx, callbackMsg(t, 5), d, "callback", faultAfterCallback); !errors.Is(err, errCrash) || d.write != nil {
		t.Fatalf("a crash after a deferred write: %v, write %v; want errCrash and nothing to wait for", err, d.write)
	}
	crashAt = ""
	d = &deferred{Msg: p.take(t, batchOf(6))}
	if err := pb.thenAck(p.ctx, callbackMsg(t, 6), d, "callback 6", faultAfterCallback); err != nil || d.write == nil || d.what != "callback 6" {
		t.Fatalf("a deferred write: %v, write %v, what %q", err, d.write, d.what)
	}
	// The deferred token waits for the acker.
	testnats.Eventually(t, 10*time.Second, "batch 1's token acknowledged", func() bool {
		return slices.Equal(p.queued(t), []string{"3", "4", "5", "6"})
	})
	var mu sync.Mutex
	rep := &api.TickReport{Steps: make([]api.StepReport, 1)}
	a := startAcker(slog.New(slog.DiscardHandler), &mu, rep)
	a.add(d, 0)
	a.close()
	testnats.Eventually(t, 10*time.Second, "batch 6's token acknowledged", func() bool {
		return slices.Equal(p.queued(t), []string{"3", "4", "5"})
	})
	if rep.Steps[0].Error != "" {
		t.Fatalf("the acker reported %q", rep.Steps[0].Error)
	}
	if got, want := storedCallbacks(t, p), []uint64{1, 2, 4, 5, 6}; !slices.Equal(got, want) {
		t.Fatalf("CALLBACKS holds %v, want %v", got, want)
	}
}

// TestAcker: the acker of a tick acknowledges each token once its write
// is stored; a write the stream refused, or whose PubAck does not come by
// its deadline, puts its token back for a redelivery soon and turns its
// step into an error; a token with no write to wait for is left alone.
func TestAcker(t *testing.T) {
	p := startParts(t)
	async := p.acks(t)
	publish := func(m *nats.Msg) pendingWrite {
		w, err := async.Publish(m)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	stored := &deferred{Msg: p.take(t, batchOf(1)), write: publish(callbackMsg(t, 1)), what: "callback 1"}
	refused := &deferred{Msg: p.take(t, batchOf(2)), write: publish(refusedCallback(t, 2)), what: "callback 2"}
	settled := &deferred{Msg: p.take(t, batchOf(3))}
	// A write whose answer never comes, past its deadline.
	lost := &deferred{Msg: p.take(t, batchOf(4)), write: &groupMember{deadline: time.Now(), done: make(chan struct{})}, what: "callback 4"}
	grouped := &deferred{Msg: p.take(t, batchOf(5))}
	if err := newPublisher(t, p, nil).callbackThenAck(p.ctx, callbackMsg(t, 5), grouped, "callback 5", true); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	rep := &api.TickReport{Steps: make([]api.StepReport, 5)}
	for i := range rep.Steps {
		rep.Steps[i].Action = api.ActionFinished
	}
	a := startAcker(slog.New(slog.DiscardHandler), &mu, rep)
	for i, d := range []*deferred{stored, refused, settled, lost, grouped} {
		a.add(d, i)
	}
	a.close()

	for i, s := range rep.Steps {
		switch i {
		case 1:
			if s.Action != api.ActionError || !strings.Contains(s.Error, "processor: callback 2") {
				t.Fatalf("step of a refused write: %+v", s)
			}
		case 3:
			if s.Action != api.ActionError || !strings.Contains(s.Error, jsapi.ErrPubAckTimeout.Error()) {
				t.Fatalf("step of a lost write: %+v", s)
			}
		default:
			if s.Action != api.ActionFinished || s.Error != "" {
				t.Fatalf("step %d: %+v, want it as it was", i, s)
			}
		}
	}
	testnats.Eventually(t, 10*time.Second, "the stored writes' tokens acknowledged", func() bool {
		return slices.Equal(p.queued(t), []string{"2", "3", "4"})
	})
	// Put back with a delay: delivered again well within the ack wait.
	p.redelivered(t, "2")
	p.redelivered(t, "4")
	if got, want := storedCallbacks(t, p), []uint64{1, 5}; !slices.Equal(got, want) {
		t.Fatalf("CALLBACKS holds %v, want %v", got, want)
	}
}
