package processor

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

// flightGate holds every flight of a grouper right after its message's
// PubAck (at faultAfterCallbackGroup) until it is opened, so that a test
// knows which callbacks wait while maxCallbackFlights messages are out.
type flightGate struct {
	entered chan struct{}
	open    chan struct{}
}

func newFlightGate() *flightGate {
	return &flightGate{entered: make(chan struct{}, 1024), open: make(chan struct{})}
}

func (f *flightGate) fault(point string) error {
	if point == faultAfterCallbackGroup {
		f.entered <- struct{}{}
		<-f.open
	}
	return nil
}

// fill hands g the callbacks of batches ids one by one, each once the
// flight before it is held: each goes alone, in a flight of its own.
func (f *flightGate) fill(t *testing.T, g *callbackGrouper, ids ...uint64) []*groupMember {
	t.Helper()
	var out []*groupMember
	for _, id := range ids {
		out = append(out, addAll(t, g, id)...)
		if _, ok := testnats.Receive(f.entered, 10*time.Second); !ok {
			t.Fatalf("the flight of batch %d's callback not held", id)
		}
	}
	return out
}

// newGrouper is a grouper of the processor's connection, as New builds it,
// with fault as its crash-point hook.
func newGrouper(t *testing.T, p *parts, fault crashPoints) *callbackGrouper {
	t.Helper()
	return &callbackGrouper{async: p.acks(t), domain: partsDomain, maxBytes: int(p.nc.MaxPayload()) - callbackGroupHeadroom, fault: fault}
}

// addAll hands the callbacks of batches ids to g, in order.
func addAll(t *testing.T, g *callbackGrouper, ids ...uint64) []*groupMember {
	t.Helper()
	out := make([]*groupMember, len(ids))
	for i, id := range ids {
		out[i] = g.add(callbackMsg(t, id))
	}
	return out
}

// resolved waits for every member and returns their sequences, failing
// on any error.
func resolved(t *testing.T, ms []*groupMember) []uint64 {
	t.Helper()
	seqs := make([]uint64, len(ms))
	for i, m := range ms {
		if _, ok := testnats.Receive(m.Done(), 10*time.Second); !ok {
			t.Fatalf("member %d not resolved", i)
		}
		seq, err := m.Result()
		if err != nil {
			t.Fatalf("member %d: %v", i, err)
		}
		seqs[i] = seq
	}
	return seqs
}

// callbackMessage is a message of CALLBACKS: its sequence, its batch ids
// in order, and its headers.
type callbackMessage struct {
	seq    uint64
	ids    []uint64
	group  bool
	header nats.Header
}

// callbackMessages reads CALLBACKS back and checks each message's headers
// agree with its body: a group says its count and first and last batch
// ids and has no deduplication id; a lone callback has its cb-<id>.
func callbackMessages(t *testing.T, p *parts) []callbackMessage {
	t.Helper()
	var out []callbackMessage
	for _, m := range p.stored(t, streams.StreamCallbacks) {
		cbs, group, err := records.DecodeCallbacks(m.Data)
		if err != nil {
			t.Fatalf("message %d: %v", m.Sequence, err)
		}
		cm := callbackMessage{seq: m.Sequence, group: group, header: m.Header}
		for _, cb := range cbs {
			cm.ids = append(cm.ids, cb.BatchID)
		}
		h := m.Header
		if m.Subject != streams.CallbackSubject(partsDomain) {
			t.Fatalf("message %d on %q, want %q", m.Sequence, m.Subject, streams.CallbackSubject(partsDomain))
		}
		if group {
			first, last := strconv.FormatUint(cm.ids[0], 10), strconv.FormatUint(cm.ids[len(cm.ids)-1], 10)
			if h.Get(streams.HeaderKind) != streams.KindCallbacks || h.Get(streams.HeaderCount) != strconv.Itoa(len(cbs)) ||
				h.Get(streams.HeaderFirstBatchID) != first || h.Get(streams.HeaderLastBatchID) != last ||
				h.Get(nats.MsgIdHdr) != "" || h.Get(streams.HeaderDomain) != partsDomain {
				t.Fatalf("group %d of %v has headers %v", m.Sequence, cm.ids, h)
			}
		} else if h.Get(nats.MsgIdHdr) != streams.CallbackMsgID(cm.ids[0]) || h.Get(streams.HeaderKind) != "" {
			t.Fatalf("lone callback %d of batch %d has headers %v, want its id %s", m.Sequence, cm.ids[0], h, streams.CallbackMsgID(cm.ids[0]))
		}
		out = append(out, cm)
	}
	return out
}

// runOf is ids from..to.
func runOf(from, to uint64) []uint64 {
	var out []uint64
	for id := from; id <= to; id++ {
		out = append(out, id)
	}
	return out
}

// partition is the batch ids of each message, sorted by their first id:
// two flights may store their messages in either order.
func partition(msgs []callbackMessage) [][]uint64 {
	out := make([][]uint64, len(msgs))
	for i, m := range msgs {
		out[i] = m.ids
	}
	slices.SortFunc(out, func(a, b []uint64) int { return int(a[0]) - int(b[0]) })
	return out
}

// TestCallbackGrouperLoneCallback: an idle grouper publishes a callback at
// once, alone, with its deduplication id cb-<id>; the same callback
// published again (a step repeated after a crash) is a duplicate: the
// member gets the first copy's sequence and CALLBACKS holds one message.
func TestCallbackGrouperLoneCallback(t *testing.T) {
	p := startParts(t)
	g := newGrouper(t, p, nil)
	first := resolved(t, addAll(t, g, 7))[0]
	again := resolved(t, addAll(t, g, 7))[0]
	g.wait()
	msgs := callbackMessages(t, p)
	if len(msgs) != 1 || msgs[0].group || !slices.Equal(msgs[0].ids, []uint64{7}) {
		t.Fatalf("CALLBACKS holds %+v, want batch 7's callback alone", msgs)
	}
	if first != msgs[0].seq || again != first {
		t.Fatalf("members resolved at %d and %d, want both at the stored message %d", first, again, msgs[0].seq)
	}
	if m := addAll(t, g, 8)[0]; time.Until(m.Deadline()) <= 0 || time.Until(m.Deadline()) > callbackMemberPatience {
		t.Fatalf("member deadline %s from now, want within %s", time.Until(m.Deadline()), callbackMemberPatience)
	}
	g.wait()
}

// TestCallbackGrouperGroupsWhileTwoFly: while two messages are on their
// way, the callbacks that come wait; then the next flight takes the 64
// oldest as one group, in order, and the 65th goes in a message of its
// own. Every member resolves with its message's sequence, and no third
// flight ever starts.
func TestCallbackGrouperGroupsWhileTwoFly(t *testing.T) {
	p := startParts(t)
	gate := newFlightGate()
	g := newGrouper(t, p, gate.fault)
	early := gate.fill(t, g, 1, 2)
	late := addAll(t, g, runOf(3, 67)...)
	g.mu.Lock()
	flights, waiting := g.flights, len(g.waiting)
	g.mu.Unlock()
	if flights != maxCallbackFlights || waiting != 65 {
		t.Fatalf("with two flights held: %d flights, %d callbacks waiting; want %d and 65", flights, waiting, maxCallbackFlights)
	}
	close(gate.open)
	seqs := resolved(t, append(early, late...))
	g.wait()

	msgs := callbackMessages(t, p)
	want := [][]uint64{{1}, {2}, runOf(3, 66), {67}}
	if got := partition(msgs); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("CALLBACKS holds messages of %v, want %v", got, want)
	}
	seqOf := map[uint64]uint64{}
	for _, m := range msgs {
		for _, id := range m.ids {
			seqOf[id] = m.seq
		}
	}
	for i, id := range runOf(1, 67) {
		if seqs[i] != seqOf[id] {
			t.Fatalf("batch %d's member resolved at %d, its callback is stored at %d", id, seqs[i], seqOf[id])
		}
	}
	if g.flights != 0 || len(g.waiting) != 0 {
		t.Fatalf("after wait: %d flights, %d waiting", g.flights, len(g.waiting))
	}
}

// TestCallbackGrouperMaxBytes: a group takes only the callbacks that fit
// maxBytes beside its overhead, the oldest first.
func TestCallbackGrouperMaxBytes(t *testing.T) {
	p := startParts(t)
	gate := newFlightGate()
	g := newGrouper(t, p, gate.fault)
	// Batch ids of one width encode to callbacks of one size.
	g.maxBytes = records.CallbackGroupOverhead + 3*len(callbackMsg(t, 11).Data)
	ms := gate.fill(t, g, 11, 12)
	ms = append(ms, addAll(t, g, runOf(13, 19)...)...)
	close(gate.open)
	resolved(t, ms)
	g.wait()
	want := [][]uint64{{11}, {12}, {13, 14, 15}, {16, 17, 18}, {19}}
	if got := partition(callbackMessages(t, p)); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("CALLBACKS holds messages of %v, want %v", got, want)
	}
}

// TestCallbackGrouperRefusedGroup: a group the stream refuses (here, too
// large for it) fails every member with the stream's error, and nothing of
// it is stored; the callbacks before and after it are stored as usual.
func TestCallbackGrouperRefusedGroup(t *testing.T) {
	p := startParts(t)
	gate := newFlightGate()
	g := newGrouper(t, p, gate.fault)
	// CALLBACKS takes a lone callback, not three.
	p.limitMsgSize(t, streams.StreamCallbacks, 2*len(callbackMsg(t, 1).Data))
	early := gate.fill(t, g, 1, 2)
	refused := addAll(t, g, 3, 4, 5)
	close(gate.open)
	resolved(t, early)
	var first error
	for i, m := range refused {
		if _, ok := testnats.Receive(m.Done(), 10*time.Second); !ok {
			t.Fatalf("refused member %d not resolved", i)
		}
		seq, err := m.Result()
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || seq != 0 {
			t.Fatalf("member of a refused group: %d, %v; want the stream's error", seq, err)
		}
		if first == nil {
			first = err
		} else if err.Error() != first.Error() {
			t.Fatalf("members of one group failed differently: %v and %v", first, err)
		}
	}
	after := resolved(t, addAll(t, g, 6))
	g.wait()
	msgs := callbackMessages(t, p)
	want := [][]uint64{{1}, {2}, {6}}
	if got := partition(msgs); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("CALLBACKS holds messages of %v, want %v", got, want)
	}
	if after[0] != msgs[len(msgs)-1].seq {
		t.Fatalf("the callback after the refused group resolved at %d, stored at %d", after[0], msgs[len(msgs)-1].seq)
	}
}

// TestCallbackGrouperCrashAfterStored: a crash after the message is stored
// fails its members (their tokens are not acknowledged), and the message
// stays stored.
func TestCallbackGrouperCrashAfterStored(t *testing.T) {
	p := startParts(t)
	crash := errors.New("crash")
	g := newGrouper(t, p, func(point string) error {
		if point == faultAfterCallbackGroup {
			return crash
		}
		return nil
	})
	m := addAll(t, g, 9)[0]
	if _, ok := testnats.Receive(m.Done(), 10*time.Second); !ok {
		t.Fatal("member not resolved")
	}
	if _, err := m.Result(); !errors.Is(err, errCrash) || !errors.Is(err, crash) {
		t.Fatalf("member after a crash: %v, want errCrash", err)
	}
	g.wait()
	if msgs := callbackMessages(t, p); len(msgs) != 1 || !slices.Equal(msgs[0].ids, []uint64{9}) {
		t.Fatalf("CALLBACKS holds %+v, want batch 9's callback", msgs)
	}
}

// TestCallbackGrouperConcurrent: callbacks handed over from many steps at
// once are each stored exactly once, in messages of at most
// records.CallbackGroupMax, each step's in the order it handed them over,
// and each member resolves with the sequence of the message that holds it.
func TestCallbackGrouperConcurrent(t *testing.T) {
	p := startParts(t)
	g := newGrouper(t, p, nil)
	const steps, each = 8, 40
	msgs := make([][]*nats.Msg, steps)
	for s := range steps {
		for i := range each {
			msgs[s] = append(msgs[s], callbackMsg(t, uint64(1000*(s+1)+i)))
		}
	}
	members := make([][]*groupMember, steps)
	var wg sync.WaitGroup
	for s := range steps {
		wg.Go(func() {
			for _, m := range msgs[s] {
				members[s] = append(members[s], g.add(m))
			}
		})
	}
	wg.Wait()
	seqs := make([][]uint64, steps)
	for s := range steps {
		seqs[s] = resolved(t, members[s])
	}
	g.wait()
	stored := callbackMessages(t, p)
	seqOf := map[uint64]uint64{}
	for _, m := range stored {
		if len(m.ids) > records.CallbackGroupMax {
			t.Fatalf("message %d carries %d callbacks, more than %d", m.seq, len(m.ids), records.CallbackGroupMax)
		}
		last := map[uint64]uint64{}
		for _, id := range m.ids {
			if _, dup := seqOf[id]; dup {
				t.Fatalf("batch %d's callback stored twice", id)
			}
			seqOf[id] = m.seq
			if step := id / 1000; id < last[step] {
				t.Fatalf("message %d has step %d's callbacks out of order: %v", m.seq, step, m.ids)
			}
			last[id/1000] = id
		}
	}
	for s := range steps {
		for i, seq := range seqs[s] {
			id := uint64(1000*(s+1) + i)
			if at, ok := seqOf[id]; !ok || at != seq {
				t.Fatalf("batch %d resolved at %d, stored at %d (%v)", id, seq, at, ok)
			}
		}
	}
	if len(seqOf) != steps*each {
		t.Fatalf("CALLBACKS holds %d callbacks, want %d", len(seqOf), steps*each)
	}
	t.Logf("%d callbacks in %d messages", steps*each, len(stored))
}
