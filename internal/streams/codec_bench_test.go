package streams_test

import (
	"testing"

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
	req := streams.WorkRequest{BatchID: bt.ID, Domain: bt.Domain, CreatedAt: bt.CreatedAt, Submitter: bt.Submitter,
		Label: bt.Label, Attempt: 1, Unit: true, Calls: []streams.WorkCall{{Index: 0, Type: "noop"}}}
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
			must(streams.Encode(&r))
			must(streams.TokenMsg(subject, &bt, 0, 0))
		}
	})
	b.Run("drain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			must(streams.Decode[streams.Token](tokMsg.Data))
			wb := streams.WorkBatch{Units: []streams.WorkRequest{req}}
			data, err := streams.Encode(&wb)
			must(nil, err)
			must(streams.Decode[streams.WorkBatch](data))
			must(streams.Encode(&streams.Completion{Running: true, Until: bt.CreatedAt, Worker: "worker-1"}))
			must(streams.Encode(&streams.Completion{Worker: "worker-1", Outputs: outputs}))
			reply := streams.WorkBatchReply{Replies: []streams.WorkReply{{Outputs: outputs, Fresh: true}}}
			data, err = streams.Encode(&reply)
			must(nil, err)
			must(streams.Decode[streams.WorkBatchReply](data))
			c := cb
			data, err = streams.Encode(&c)
			must(nil, err)
			must(streams.Decode[streams.Callback](data))
			r := rec
			data, err = streams.Encode(&r)
			must(nil, err)
			got, err := streams.Decode[streams.BatchRecord](data)
			must(nil, err)
			got.History = append(got.History, streams.Event{At: cb.At, What: "callback", Detail: "Executed"})
			must(streams.Encode(&got))
		}
	})
}
