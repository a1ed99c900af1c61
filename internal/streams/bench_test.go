package streams_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// The wire records of the hot path, as a no-op atomic batch produces them:
// the token authz queues, the record it keeps, the progress a processor
// writes when the batch finishes, and the terminal callback. The "full"
// variants are the every-field fixtures of records_test.go.

func benchNoopBatch() pipeline.Batch {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	return pipeline.Batch{
		ID: 123456, Domain: "payments", Label: "transfer", Submitter: "alice", Priority: pipeline.High,
		Functions:  []pipeline.Function{{Type: "noop"}},
		Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic},
		CreatedAt:  now,
	}
}

func benchNoopRecord() streams.BatchRecord {
	b := benchNoopBatch()
	return streams.BatchRecord{Batch: b, Status: pipeline.InProcess, CreatedAt: b.CreatedAt, UpdatedAt: b.CreatedAt,
		History: []streams.Event{{At: b.CreatedAt, What: "accepted", Detail: "high queue of payments"}}}
}

func benchNoopProgress() streams.Progress {
	o := pipeline.ExecutedOutcome(1)
	return streams.Progress{BatchID: 123456, State: streams.Done, Next: 1, Outputs: []pipeline.Output{{Index: 0, Type: "noop"}},
		Outcome: &o, UpdatedAt: time.Date(2026, 11, 1, 12, 0, 1, 0, time.UTC)}
}

func benchNoopCallback() streams.Callback {
	return streams.Callback{BatchID: 123456, Domain: "payments", Priority: pipeline.High, Outcome: pipeline.ExecutedOutcome(1),
		Attempts: 1, At: time.Date(2026, 11, 1, 12, 0, 1, 0, time.UTC), Processor: "processor-1"}
}

// benchCodec benchmarks Encode and Decode of one record.
func benchCodec[T any, P interface {
	*T
}](b *testing.B, v T, enc func(*T) ([]byte, error), dec func([]byte) (T, error)) {
	data, err := enc(&v)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			w := v
			if _, err := enc(&w); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := dec(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkToken(b *testing.B) {
	benchCodec[streams.Token, *streams.Token](b, streams.Token{BatchID: 123456}, streams.Encode[streams.Token], streams.Decode[streams.Token])
}

func BenchmarkBatchRecord(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		benchCodec[streams.BatchRecord, *streams.BatchRecord](b, benchNoopRecord(), streams.Encode[streams.BatchRecord], streams.Decode[streams.BatchRecord])
	})
	b.Run("full", func(b *testing.B) {
		benchCodec[streams.BatchRecord, *streams.BatchRecord](b, batchRecordFixture(), streams.Encode[streams.BatchRecord], streams.Decode[streams.BatchRecord])
	})
}

func BenchmarkProgress(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		benchCodec[streams.Progress, *streams.Progress](b, benchNoopProgress(), streams.Encode[streams.Progress], streams.Decode[streams.Progress])
	})
	b.Run("full", func(b *testing.B) {
		benchCodec[streams.Progress, *streams.Progress](b, progressFixture(), streams.Encode[streams.Progress], streams.Decode[streams.Progress])
	})
}

func BenchmarkCallback(b *testing.B) {
	benchCodec[streams.Callback, *streams.Callback](b, benchNoopCallback(), streams.Encode[streams.Callback], streams.Decode[streams.Callback])
}

func BenchmarkWorkRequest(b *testing.B) {
	bt := benchNoopBatch()
	req := streams.WorkRequest{BatchID: bt.ID, Domain: bt.Domain, CreatedAt: bt.CreatedAt, Attempt: 1, Unit: true,
		Calls: []streams.WorkCall{{Index: 0, Type: "noop"}}}
	benchCodec[streams.WorkRequest, *streams.WorkRequest](b, req, streams.Encode[streams.WorkRequest], streams.Decode[streams.WorkRequest])
}

// BenchmarkTokenMsg builds the queue message of a batch: body and the
// readable headers (Batch-Id, Domain, Kind, Priority, Gen, Step, Nats-Msg-Id).
func BenchmarkTokenMsg(b *testing.B) {
	bt := benchNoopBatch()
	subject := streams.TokenSubject(bt.Priority, bt.Domain)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := streams.TokenMsg(subject, &bt, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}
