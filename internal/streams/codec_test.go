package streams_test

import (
	"testing"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/wire/wiretest"
	"github.com/tickflow/tickflow/pipeline"
)

// Shadow types: the same fields and tags without the hand-written codec,
// so msgpack/v5 encodes them by reflection.
type (
	tokenReflect          streams.Token
	eventReflect          streams.Event
	batchRecordReflect    streams.BatchRecord
	callbackReflect       streams.Callback
	workCallReflect       streams.WorkCall
	inclusionCallReflect  streams.InclusionCall
	workRequestReflect    streams.WorkRequest
	workErrorReflect      streams.WorkError
	completionReflect     streams.Completion
	unitGroupReflect      streams.UnitGroup
	unitEntryReflect      streams.UnitEntry
	workReplyReflect      streams.WorkReply
	workBatchReflect      streams.WorkBatch
	workBatchReplyReflect streams.WorkBatchReply
)

// TestCodecMatchesReflection proves each hand-written record codec
// wire-compatible with msgpack/v5's reflection, both ways, over populated,
// zero and empty-but-not-nil values (see wiretest.Check).
func TestCodecMatchesReflection(t *testing.T) {
	t.Run("Token", func(t *testing.T) {
		tok := canonical(tokenFixture()).(streams.Token)
		tok.V = streams.WireVersion
		wiretest.Check[streams.Token, tokenReflect](t, tok)
		wiretest.Check[streams.Token, tokenReflect](t, streams.Token{})
		wiretest.Check[streams.Token, tokenReflect](t, streams.Token{V: 200, BatchID: 1<<64 - 1, Gen: 1<<32 - 1, Rotation: 7})
	})
	t.Run("Event", func(t *testing.T) {
		wiretest.Check[streams.Event, eventReflect](t, streams.Event{At: at(1), What: "accepted", Detail: "by alice"})
		wiretest.Check[streams.Event, eventReflect](t, streams.Event{})
	})
	t.Run("BatchRecord", func(t *testing.T) {
		wiretest.Check[streams.BatchRecord, batchRecordReflect](t, canonical(batchRecordFixture()).(streams.BatchRecord))
		wiretest.Check[streams.BatchRecord, batchRecordReflect](t, canonical(benchNoopRecord()).(streams.BatchRecord))
		wiretest.Check[streams.BatchRecord, batchRecordReflect](t, streams.BatchRecord{})
		wiretest.Check[streams.BatchRecord, batchRecordReflect](t, streams.BatchRecord{History: []streams.Event{}, Outcome: &pipeline.Outcome{}})
	})
	t.Run("Callback", func(t *testing.T) {
		wiretest.Check[streams.Callback, callbackReflect](t, canonical(callbackFixture()).(streams.Callback))
		wiretest.Check[streams.Callback, callbackReflect](t, streams.Callback{})
	})
	t.Run("WorkCall", func(t *testing.T) {
		wiretest.Check[streams.WorkCall, workCallReflect](t, workRequestFixture().Calls[0])
		wiretest.Check[streams.WorkCall, workCallReflect](t, streams.WorkCall{})
	})
	t.Run("InclusionCall", func(t *testing.T) {
		wiretest.Check[streams.InclusionCall, inclusionCallReflect](t, *workRequestFixture().Inclusion)
		wiretest.Check[streams.InclusionCall, inclusionCallReflect](t, streams.InclusionCall{})
	})
	t.Run("WorkRequest", func(t *testing.T) {
		wiretest.Check[streams.WorkRequest, workRequestReflect](t, canonical(workRequestFixture()).(streams.WorkRequest))
		wiretest.Check[streams.WorkRequest, workRequestReflect](t, streams.WorkRequest{})
		wiretest.Check[streams.WorkRequest, workRequestReflect](t, streams.WorkRequest{Calls: []streams.WorkCall{},
			Inputs: []pipeline.Output{}, Trace: map[string]string{}, Attempt: -1})
	})
	t.Run("WorkError", func(t *testing.T) {
		wiretest.Check[streams.WorkError, workErrorReflect](t, *workReplyFixture().Error)
		wiretest.Check[streams.WorkError, workErrorReflect](t, streams.WorkError{})
	})
	t.Run("Completion", func(t *testing.T) {
		wiretest.Check[streams.Completion, completionReflect](t, canonical(completionFixture()).(streams.Completion))
		wiretest.Check[streams.Completion, completionReflect](t, streams.Completion{})
	})
	t.Run("UnitGroup", func(t *testing.T) {
		wiretest.Check[streams.UnitGroup, unitGroupReflect](t, canonical(unitGroupFixture()).(streams.UnitGroup))
		wiretest.Check[streams.UnitGroup, unitGroupReflect](t, streams.UnitGroup{})
	})
	t.Run("UnitEntry", func(t *testing.T) {
		wiretest.Check[streams.UnitEntry, unitEntryReflect](t, canonical(unitGroupFixture()).(streams.UnitGroup).Units[0])
		wiretest.Check[streams.UnitEntry, unitEntryReflect](t, streams.UnitEntry{})
	})
	t.Run("WorkReply", func(t *testing.T) {
		wiretest.Check[streams.WorkReply, workReplyReflect](t, canonical(workReplyFixture()).(streams.WorkReply))
		wiretest.Check[streams.WorkReply, workReplyReflect](t, streams.WorkReply{})
	})
	t.Run("WorkBatch", func(t *testing.T) {
		wiretest.Check[streams.WorkBatch, workBatchReflect](t, canonical(workBatchFixture()).(streams.WorkBatch))
		wiretest.Check[streams.WorkBatch, workBatchReflect](t, streams.WorkBatch{})
		wiretest.Check[streams.WorkBatch, workBatchReflect](t, streams.WorkBatch{Units: []streams.WorkRequest{}})
	})
	t.Run("WorkBatchReply", func(t *testing.T) {
		wiretest.Check[streams.WorkBatchReply, workBatchReplyReflect](t, canonical(workBatchReplyFixture()).(streams.WorkBatchReply))
		wiretest.Check[streams.WorkBatchReply, workBatchReplyReflect](t, streams.WorkBatchReply{})
	})
}

// TestTraceMapOrder: a trace of several entries is written with its keys
// sorted, so the same request always has the same bytes, and any order
// reads back.
func TestTraceMapOrder(t *testing.T) {
	req := streams.WorkRequest{Trace: map[string]string{"traceparent": "00-a-b-01", "tracestate": "x=1", "baggage": "k=v"}}
	first, err := streams.Encode(&req)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := streams.Encode(&req)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatalf("the same request encoded as\n%x\nand\n%x", first, again)
		}
	}
	got, err := streams.Decode[streams.WorkRequest](first)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Trace) != 3 || got.Trace["baggage"] != "k=v" {
		t.Fatalf("trace read back as %v", got.Trace)
	}
}

func FuzzDecodeWorkBatch(f *testing.F) {
	for _, v := range []streams.WorkBatch{workBatchFixture(), {}} {
		b, err := streams.Encode(&v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	fuzzDecode(f, streams.Encode[streams.WorkBatch], streams.Decode[streams.WorkBatch])
}

func FuzzDecodeWorkBatchReply(f *testing.F) {
	for _, v := range []streams.WorkBatchReply{workBatchReplyFixture(), {}} {
		b, err := streams.Encode(&v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	fuzzDecode(f, streams.Encode[streams.WorkBatchReply], streams.Decode[streams.WorkBatchReply])
}
