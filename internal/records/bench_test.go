package records_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
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

func benchNoopRecord() records.BatchRecord {
	b := benchNoopBatch()
	return records.BatchRecord{Batch: b, Status: pipeline.InProcess, CreatedAt: b.CreatedAt, UpdatedAt: b.CreatedAt,
		History: []records.Event{{At: b.CreatedAt, What: "accepted", Detail: "high queue of payments"}}}
}

func benchNoopProgress() records.Progress {
	o := pipeline.ExecutedOutcome(1)
	return records.Progress{BatchID: 123456, State: records.Done, Next: 1, Outputs: []pipeline.Output{{Index: 0, Type: "noop"}},
		Outcome: &o, UpdatedAt: time.Date(2026, 11, 1, 12, 0, 1, 0, time.UTC)}
}

func benchNoopCallback() records.Callback {
	return records.Callback{BatchID: 123456, Domain: "payments", Priority: pipeline.High, Outcome: pipeline.ExecutedOutcome(1),
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
	benchCodec[records.Token, *records.Token](b, records.Token{BatchID: 123456}, records.Encode[records.Token], records.Decode[records.Token])
}

func BenchmarkBatchRecord(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		benchCodec[records.BatchRecord, *records.BatchRecord](b, benchNoopRecord(), records.Encode[records.BatchRecord], records.Decode[records.BatchRecord])
	})
	b.Run("full", func(b *testing.B) {
		benchCodec[records.BatchRecord, *records.BatchRecord](b, batchRecordFixture(), records.Encode[records.BatchRecord], records.Decode[records.BatchRecord])
	})
}

func BenchmarkProgress(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		benchCodec[records.Progress, *records.Progress](b, benchNoopProgress(), records.Encode[records.Progress], records.Decode[records.Progress])
	})
	b.Run("full", func(b *testing.B) {
		benchCodec[records.Progress, *records.Progress](b, progressFixture(), records.Encode[records.Progress], records.Decode[records.Progress])
	})
}

func BenchmarkCallback(b *testing.B) {
	benchCodec[records.Callback, *records.Callback](b, benchNoopCallback(), records.Encode[records.Callback], records.Decode[records.Callback])
}

func BenchmarkWorkRequest(b *testing.B) {
	bt := benchNoopBatch()
	req := records.WorkRequest{BatchID: bt.ID, Domain: bt.Domain, CreatedAt: bt.CreatedAt, Attempt: 1, Unit: true,
		Calls: []records.WorkCall{{Index: 0, Type: "noop"}}}
	benchCodec[records.WorkRequest, *records.WorkRequest](b, req, records.Encode[records.WorkRequest], records.Decode[records.WorkRequest])
}
