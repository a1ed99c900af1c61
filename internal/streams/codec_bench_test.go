package streams_test

import (
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// BenchmarkNoopBatchWire is the record encoding and decoding one atomic
// no-op batch costs on its way, summed over the components: the submit
// (authz writes the record and the token) and the drain (the processor
// reads the token and asks a worker, the worker claims and records the
// call and answers, the processor publishes the callback, authz reads it
// and rewrites the record).
func BenchmarkNoopBatchWire(b *testing.B) {
	bt := benchNoopBatch()
	subject := streams.TokenSubject(bt.Priority, bt.Domain)
	rec := benchNoopRecord()
	tokMsg, err := streams.TokenMsg(subject, &bt, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	req := records.WorkRequest{BatchID: bt.ID, Domain: bt.Domain, CreatedAt: bt.CreatedAt, Submitter: bt.Submitter,
		Label: bt.Label, Attempt: 1, Unit: true, Calls: []records.WorkCall{{Index: 0, Type: "noop"}}}
	outputs := []pipeline.Output{{Index: 0, Type: "noop"}}
	cb := benchNoopCallback()
	must := func(_ any, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("submit", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r := rec
			must(records.Encode(&r))
			must(streams.TokenMsg(subject, &bt, 0, 0))
		}
	})
	b.Run("drain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			must(records.Decode[records.Token](tokMsg.Data))
			wb := records.WorkBatch{Units: []records.WorkRequest{req}}
			data, err := records.Encode(&wb)
			must(nil, err)
			must(records.Decode[records.WorkBatch](data))
			must(records.Encode(&records.Completion{Running: true, Until: bt.CreatedAt, Worker: "worker-1"}))
			must(records.Encode(&records.Completion{Worker: "worker-1", Outputs: outputs}))
			reply := records.WorkBatchReply{Replies: []records.WorkReply{{Outputs: outputs, Fresh: true}}}
			data, err = records.Encode(&reply)
			must(nil, err)
			must(records.Decode[records.WorkBatchReply](data))
			c := cb
			data, err = records.Encode(&c)
			must(nil, err)
			must(records.Decode[records.Callback](data))
			r := rec
			data, err = records.Encode(&r)
			must(nil, err)
			got, err := records.Decode[records.BatchRecord](data)
			must(nil, err)
			got.History = append(got.History, records.Event{At: cb.At, What: "callback", Detail: "Executed"})
			must(records.Encode(&got))
		}
	})
}
