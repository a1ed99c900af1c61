package processor

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// partsNow is the clock of the parts built for these tests.
var partsNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// newPublisher is a publisher of the processor's connection, as New
// builds it, named p1, with fault as its crash-point hook.
func newPublisher(t *testing.T, p *parts, fault crashPoints) *publisher {
	t.Helper()
	pb := &publisher{
		js: p.js, async: p.acks(t), limits: recordLimits{maxPayload: p.nc.MaxPayload},
		domain: partsDomain, name: "p1", now: func() time.Time { return partsNow },
		log: slog.New(slog.DiscardHandler), fault: fault,
	}
	pb.groups = newGrouper(t, p, fault)
	return pb
}

// TestPublisherToken: a token goes to the back of its batch's queue with
// its generation and rotation in its body, headers and deduplication id:
// the same rotation published twice is stored once, the next one anew.
func TestPublisherToken(t *testing.T) {
	p := startParts(t)
	pb := newPublisher(t, p, nil)
	b := batchOf(5)
	for _, rot := range []uint32{3, 3, 4} {
		if err := pb.token(p.ctx, b, &records.Progress{Gen: 2, Rotation: rot}); err != nil {
			t.Fatal(err)
		}
	}
	med := batchOf(6)
	med.Priority = pipeline.Med
	if err := pb.token(p.ctx, med, &records.Progress{}); err != nil {
		t.Fatal(err)
	}
	msgs := p.stored(t, streams.StreamHigh)
	if len(msgs) != 2 {
		t.Fatalf("HIGH holds %d tokens, want 2 (rotations 3 and 4)", len(msgs))
	}
	for i, rot := range []uint32{3, 4} {
		m := msgs[i]
		tok, err := records.Decode[records.Token](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != streams.RequeueSubject(pipeline.High, partsDomain) || tok.BatchID != 5 || tok.Gen != 2 || tok.Rotation != rot ||
			tok.Batch == nil || tok.Batch.Key != "k" ||
			m.Header.Get(nats.MsgIdHdr) != streams.TokenMsgID(5, 2, rot) || m.Header.Get(streams.HeaderStep) != strconv.Itoa(int(rot)) {
			t.Fatalf("token %d: subject %s, %+v, headers %v", i, m.Subject, tok, m.Header)
		}
	}
	if msgs := p.stored(t, streams.StreamMed); len(msgs) != 1 || msgs[0].Header.Get(streams.HeaderBatchID) != "6" {
		t.Fatalf("MED holds %d tokens, want batch 6's", len(msgs))
	}
}

// TestPublisherCallback: the terminal callback says what the progress
// says, at the progress's time, or now for a batch that wrote none.
func TestPublisherCallback(t *testing.T) {
	pb := &publisher{name: "p1", now: func() time.Time { return partsNow }}
	earlier := partsNow.Add(-time.Hour)
	partial := pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 1}
	outputs := []pipeline.Output{{Index: 0, Type: "noop", Data: payloadOf("out")}}
	tests := []struct {
		name   string
		mode   pipeline.Mode
		prog   records.Progress
		dlSeq  uint64
		trace  map[string]string
		want   records.Callback
		header string // the outcome header
	}{
		{name: "no progress written: now", prog: records.Progress{Outcome: &pipeline.Outcome{Status: pipeline.Executed, Executed: 1}, Next: 1},
			want:   records.Callback{Outcome: pipeline.Outcome{Status: pipeline.Executed, Executed: 1}, Attempts: 1, At: partsNow},
			header: "Executed"},
		{name: "failures counted, fallback, dead letter, outputs", dlSeq: 42, trace: map[string]string{"traceparent": "x"},
			prog: records.Progress{Outcome: &partial, Next: 1, Failures: []int{0, 3}, Fallbacks: []int{1}, Outputs: outputs, UpdatedAt: earlier},
			want: records.Callback{Outcome: partial, Attempts: 4, At: earlier, Fallback: true, DeadLetter: 42, Outputs: outputs,
				Trace: map[string]string{"traceparent": "x"}},
			header: "PartiallyExecuted(1)"},
		{name: "an atomic unit counts one attempt for its calls", mode: pipeline.Atomic,
			prog:   records.Progress{Outcome: &pipeline.Outcome{Status: pipeline.Executed, Executed: 3}, Next: 3, Failures: []int{2}, UpdatedAt: earlier},
			want:   records.Callback{Outcome: pipeline.Outcome{Status: pipeline.Executed, Executed: 3}, Attempts: 3, At: earlier},
			header: "Executed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := batchOf(9)
			b.Subroutine.Mode = tt.mode
			m, err := pb.callback(b, &tt.prog, tt.dlSeq, tt.trace)
			if err != nil {
				t.Fatal(err)
			}
			cbs, group, err := records.DecodeCallbacks(m.Data)
			if err != nil || group || len(cbs) != 1 {
				t.Fatalf("callback body: %v, group %v, %d callbacks", err, group, len(cbs))
			}
			want := tt.want
			want.V, want.BatchID, want.Domain, want.Priority, want.Processor = records.WireVersion, 9, partsDomain, pipeline.High, "p1"
			if got := cbs[0]; !equalJSON(t, got, want) {
				t.Fatalf("callback %+v, want %+v", got, want)
			}
			if m.Subject != streams.CallbackSubject(partsDomain) || m.Header.Get(nats.MsgIdHdr) != "cb-9" || m.Header.Get(streams.HeaderOutcome) != tt.header {
				t.Fatalf("callback message on %s with headers %v", m.Subject, m.Header)
			}
		})
	}
}

// TestPublisherDeadLetter: a dead letter holds the batch, where its token
// came from and why it failed, in its body and headers; it is stored once
// per batch; an atomic unit's names no function; one too large loses its
// outputs' data, and says so, but keeps the batch whole.
func TestPublisherDeadLetter(t *testing.T) {
	p := startParts(t)
	pb := newPublisher(t, p, nil)
	b := batchOf(5)
	m := p.take(t, b)
	md, err := m.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	prog := &records.Progress{
		Outcome: &pipeline.Outcome{Status: pipeline.Rejected, Reason: "bad"}, Failures: []int{2}, FailedIndex: 0,
		LastError: "first line\n\tsecond line", UpdatedAt: partsNow,
	}
	seq, err := pb.deadLetter(p.ctx, b, prog, m)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := pb.deadLetter(p.ctx, b, prog, m); err != nil || again != seq {
		t.Fatalf("the dead letter published again: %d, %v; want the first's %d", again, err, seq)
	}
	atomic := batchOf(6)
	atomic.Subroutine.Mode = pipeline.Atomic
	if _, err := pb.deadLetter(p.ctx, atomic, prog, nil); err != nil {
		t.Fatal(err)
	}
	large := batchOf(7)
	big := []pipeline.Output{{Index: 0, Type: "noop", Data: make(pipeline.Payload, pb.limits.maxRecord())}}
	if _, err := pb.deadLetter(p.ctx, large, &records.Progress{Outcome: prog.Outcome, Outputs: big, LastError: "too big"}, nil); err != nil {
		t.Fatal(err)
	}

	msgs := p.stored(t, streams.StreamDLQ)
	if len(msgs) != 3 {
		t.Fatalf("DLQ holds %d dead letters, want 3", len(msgs))
	}
	dls := make([]records.DeadLetter, len(msgs))
	for i, m := range msgs {
		if dls[i], err = records.Decode[records.DeadLetter](m.Data); err != nil {
			t.Fatal(err)
		}
	}
	h := msgs[0].Header
	if msgs[0].Sequence != seq || msgs[0].Subject != streams.DLQSubject(partsDomain) ||
		h.Get(streams.HeaderBatchID) != "5" || h.Get(streams.HeaderDomain) != partsDomain || h.Get(streams.HeaderPriority) != "high" ||
		h.Get(streams.HeaderOutcome) != "Rejected(bad)" || h.Get(streams.HeaderReason) != "first line second line" ||
		h.Get(streams.HeaderOrigin) != streams.RequeueSubject(pipeline.High, partsDomain) || h.Get(nats.MsgIdHdr) != "dl-5" {
		t.Fatalf("dead letter %d on %s with headers %v", msgs[0].Sequence, msgs[0].Subject, h)
	}
	dl := dls[0]
	if dl.Batch.ID != 5 || dl.Batch.Key != "k" || dl.Index != 0 || dl.Attempts != 2 || dl.Error != prog.LastError || !dl.At.Equal(partsNow) ||
		dl.Origin != (records.Origin{Stream: streams.StreamHigh, Subject: streams.RequeueSubject(pipeline.High, partsDomain), Seq: md.Sequence.Stream}) {
		t.Fatalf("dead letter %+v", dl)
	}
	if dls[1].Batch.ID != 6 || dls[1].Index != -1 || dls[1].Origin != (records.Origin{}) {
		t.Fatalf("atomic dead letter %+v, want index -1 and no origin", dls[1])
	}
	trimmed := dls[2]
	if trimmed.Batch.ID != 7 || len(trimmed.Outputs) != 1 || trimmed.Outputs[0].Data != nil || trimmed.Outputs[0].Type != "noop" ||
		!strings.HasPrefix(trimmed.Error, "too big (the outputs' data") || len(msgs[2].Data) > pb.limits.maxRecord() {
		t.Fatalf("a dead letter too large: %d bytes, error %q, outputs %+v", len(msgs[2].Data), trimmed.Error, trimmed.Outputs)
	}
}

// TestPublisherDeadLetterRaw: an undecodable token is copied to the DLQ
// whole and then terminated; when the DLQ refuses it, it is put back and
// comes again, and nothing is lost.
func TestPublisherDeadLetterRaw(t *testing.T) {
	p := startParts(t)
	pb := newPublisher(t, p, nil)
	junk := []byte("not a token")
	publishJunk := func() jetstream.Msg {
		if _, err := p.js.Publish(p.ctx, streams.RequeueSubject(pipeline.High, partsDomain), junk); err != nil {
			t.Fatal(err)
		}
		return p.next(t, pipeline.High)
	}
	pb.deadLetterRaw(p.ctx, publishJunk(), errors.New("cannot decode:\nat byte 0"))
	testnats.Eventually(t, 10*time.Second, "the token terminated", func() bool { return len(p.stored(t, streams.StreamHigh)) == 0 })
	msgs := p.stored(t, streams.StreamDLQ)
	if len(msgs) != 1 || string(msgs[0].Data) != string(junk) || msgs[0].Header.Get(streams.HeaderDomain) != partsDomain ||
		msgs[0].Header.Get(streams.HeaderReason) != "cannot decode: at byte 0" ||
		msgs[0].Header.Get(streams.HeaderOrigin) != streams.RequeueSubject(pipeline.High, partsDomain) {
		t.Fatalf("DLQ holds %d messages, the first %q with headers %v", len(msgs), msgs[0].Data, msgs[0].Header)
	}

	p.limitMsgSize(t, streams.StreamDLQ, 8)
	pb.deadLetterRaw(p.ctx, publishJunk(), errors.New("cannot decode"))
	again := p.next(t, pipeline.High)
	if md, err := again.Metadata(); err != nil || md.NumDelivered != 2 || string(again.Data()) != string(junk) {
		t.Fatalf("the token the DLQ refused came back as %q, %+v, %v; want it delivered again", again.Data(), md, err)
	}
	if n := len(p.stored(t, streams.StreamDLQ)); n != 1 {
		t.Fatalf("DLQ holds %d messages, want only the first", n)
	}
}

// TestHeaderValue: a header value is one line of at most 1 KiB, cut on a
// character boundary.
func TestHeaderValue(t *testing.T) {
	long := strings.Repeat("a", 1<<10-1) + "é" + "tail"
	tests := []struct {
		name, in, want string
	}{
		{name: "one line", in: "plain", want: "plain"},
		{name: "lines and runs of blanks folded", in: " a\n\tb  c\r\n", want: "a b c"},
		{name: "at most 1 KiB", in: strings.Repeat("x", 2<<10), want: strings.Repeat("x", 1<<10) + "…"},
		{name: "never halves a character", in: long, want: strings.Repeat("a", 1<<10-1) + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := headerValue(tt.in); got != tt.want {
				t.Fatalf("headerValue = %q (%d bytes), want %q", got, len(got), tt.want)
			}
		})
	}
}

// equalJSON says whether a and b read the same as JSON.
func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(ja) == string(jb)
}
