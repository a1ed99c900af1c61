package records_test

import (
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/wire/wiretest"
	"github.com/tickflow/tickflow/pipeline"
)

// Shadow types: the same fields and tags without the hand-written codec,
// so msgpack/v5 encodes them by reflection.
type (
	tokenReflect          records.Token
	eventReflect          records.Event
	batchRecordReflect    records.BatchRecord
	callbackReflect       records.Callback
	workCallReflect       records.WorkCall
	inclusionCallReflect  records.InclusionCall
	workRequestReflect    records.WorkRequest
	workErrorReflect      records.WorkError
	completionReflect     records.Completion
	unitGroupReflect      records.UnitGroup
	unitEntryReflect      records.UnitEntry
	workReplyReflect      records.WorkReply
	workBatchReflect      records.WorkBatch
	workBatchReplyReflect records.WorkBatchReply
)

// TestCodecMatchesReflection proves each hand-written record codec
// wire-compatible with msgpack/v5's reflection, both ways, over populated,
// zero and empty-but-not-nil values (see wiretest.Check).
func TestCodecMatchesReflection(t *testing.T) {
	t.Run("Token", func(t *testing.T) {
		tok := canonical(tokenFixture()).(records.Token)
		tok.V = records.WireVersion
		wiretest.Check[records.Token, tokenReflect](t, tok)
		wiretest.Check[records.Token, tokenReflect](t, records.Token{})
		wiretest.Check[records.Token, tokenReflect](t, records.Token{V: 200, BatchID: 1<<64 - 1, Gen: 1<<32 - 1, Rotation: 7})
	})
	t.Run("Event", func(t *testing.T) {
		wiretest.Check[records.Event, eventReflect](t, records.Event{At: at(1), What: "accepted", Detail: "by alice"})
		wiretest.Check[records.Event, eventReflect](t, records.Event{})
	})
	t.Run("BatchRecord", func(t *testing.T) {
		wiretest.Check[records.BatchRecord, batchRecordReflect](t, canonical(batchRecordFixture()).(records.BatchRecord))
		wiretest.Check[records.BatchRecord, batchRecordReflect](t, canonical(benchNoopRecord()).(records.BatchRecord))
		wiretest.Check[records.BatchRecord, batchRecordReflect](t, records.BatchRecord{})
		wiretest.Check[records.BatchRecord, batchRecordReflect](t, records.BatchRecord{History: []records.Event{}, Outcome: &pipeline.Outcome{}})
	})
	t.Run("Callback", func(t *testing.T) {
		wiretest.Check[records.Callback, callbackReflect](t, canonical(callbackFixture()).(records.Callback))
		wiretest.Check[records.Callback, callbackReflect](t, records.Callback{})
	})
	t.Run("WorkCall", func(t *testing.T) {
		wiretest.Check[records.WorkCall, workCallReflect](t, workRequestFixture().Calls[0])
		wiretest.Check[records.WorkCall, workCallReflect](t, records.WorkCall{})
	})
	t.Run("InclusionCall", func(t *testing.T) {
		wiretest.Check[records.InclusionCall, inclusionCallReflect](t, *workRequestFixture().Inclusion)
		wiretest.Check[records.InclusionCall, inclusionCallReflect](t, records.InclusionCall{})
	})
	t.Run("WorkRequest", func(t *testing.T) {
		wiretest.Check[records.WorkRequest, workRequestReflect](t, canonical(workRequestFixture()).(records.WorkRequest))
		wiretest.Check[records.WorkRequest, workRequestReflect](t, records.WorkRequest{})
		wiretest.Check[records.WorkRequest, workRequestReflect](t, records.WorkRequest{Calls: []records.WorkCall{},
			Inputs: []pipeline.Output{}, Trace: map[string]string{}, Attempt: -1})
	})
	t.Run("WorkError", func(t *testing.T) {
		wiretest.Check[records.WorkError, workErrorReflect](t, *workReplyFixture().Error)
		wiretest.Check[records.WorkError, workErrorReflect](t, records.WorkError{})
	})
	t.Run("Completion", func(t *testing.T) {
		wiretest.Check[records.Completion, completionReflect](t, canonical(completionFixture()).(records.Completion))
		wiretest.Check[records.Completion, completionReflect](t, records.Completion{})
	})
	t.Run("UnitGroup", func(t *testing.T) {
		wiretest.Check[records.UnitGroup, unitGroupReflect](t, canonical(unitGroupFixture()).(records.UnitGroup))
		wiretest.Check[records.UnitGroup, unitGroupReflect](t, records.UnitGroup{})
	})
	t.Run("UnitEntry", func(t *testing.T) {
		wiretest.Check[records.UnitEntry, unitEntryReflect](t, canonical(unitGroupFixture()).(records.UnitGroup).Units[0])
		wiretest.Check[records.UnitEntry, unitEntryReflect](t, records.UnitEntry{})
	})
	t.Run("WorkReply", func(t *testing.T) {
		wiretest.Check[records.WorkReply, workReplyReflect](t, canonical(workReplyFixture()).(records.WorkReply))
		wiretest.Check[records.WorkReply, workReplyReflect](t, records.WorkReply{})
	})
	t.Run("WorkBatch", func(t *testing.T) {
		wiretest.Check[records.WorkBatch, workBatchReflect](t, canonical(workBatchFixture()).(records.WorkBatch))
		wiretest.Check[records.WorkBatch, workBatchReflect](t, records.WorkBatch{})
		wiretest.Check[records.WorkBatch, workBatchReflect](t, records.WorkBatch{Units: []records.WorkRequest{}})
	})
	t.Run("WorkBatchReply", func(t *testing.T) {
		wiretest.Check[records.WorkBatchReply, workBatchReplyReflect](t, canonical(workBatchReplyFixture()).(records.WorkBatchReply))
		wiretest.Check[records.WorkBatchReply, workBatchReplyReflect](t, records.WorkBatchReply{})
	})
}

// TestTraceMapOrder: a trace of several entries is written with its keys
// sorted, so the same request always has the same bytes, and any order
// reads back.
func TestTraceMapOrder(t *testing.T) {
	req := records.WorkRequest{Trace: map[string]string{"traceparent": "00-a-b-01", "tracestate": "x=1", "baggage": "k=v"}}
	first, err := records.Encode(&req)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := records.Encode(&req)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(first) {
			t.Fatalf("the same request encoded as\n%x\nand\n%x", first, again)
		}
	}
	got, err := records.Decode[records.WorkRequest](first)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Trace) != 3 || got.Trace["baggage"] != "k=v" {
		t.Fatalf("trace read back as %v", got.Trace)
	}
}

func FuzzDecodeWorkBatch(f *testing.F) {
	for _, v := range []records.WorkBatch{workBatchFixture(), {}} {
		b, err := records.Encode(&v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	fuzzDecode(f, records.Encode[records.WorkBatch], records.Decode[records.WorkBatch])
}

func FuzzDecodeWorkBatchReply(f *testing.F) {
	for _, v := range []records.WorkBatchReply{workBatchReplyFixture(), {}} {
		b, err := records.Encode(&v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	fuzzDecode(f, records.Encode[records.WorkBatchReply], records.Decode[records.WorkBatchReply])
}
