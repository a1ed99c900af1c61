package records_test

import (
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/recordstest"
)

// The hot path's records are recordstest's no-op fixtures; the "full"
// variants are the every-field fixtures of records_test.go.

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
		benchCodec[records.BatchRecord, *records.BatchRecord](b, recordstest.NoopRecord(), records.Encode[records.BatchRecord], records.Decode[records.BatchRecord])
	})
	b.Run("full", func(b *testing.B) {
		benchCodec[records.BatchRecord, *records.BatchRecord](b, batchRecordFixture(), records.Encode[records.BatchRecord], records.Decode[records.BatchRecord])
	})
}

func BenchmarkProgress(b *testing.B) {
	b.Run("noop", func(b *testing.B) {
		benchCodec[records.Progress, *records.Progress](b, recordstest.NoopProgress(), records.Encode[records.Progress], records.Decode[records.Progress])
	})
	b.Run("full", func(b *testing.B) {
		benchCodec[records.Progress, *records.Progress](b, progressFixture(), records.Encode[records.Progress], records.Decode[records.Progress])
	})
}

func BenchmarkCallback(b *testing.B) {
	benchCodec[records.Callback, *records.Callback](b, recordstest.NoopCallback(), records.Encode[records.Callback], records.Decode[records.Callback])
}

func BenchmarkWorkRequest(b *testing.B) {
	bt := recordstest.NoopBatch()
	req := records.WorkRequest{BatchID: bt.ID, Domain: bt.Domain, CreatedAt: bt.CreatedAt, Attempt: 1, Unit: true,
		Calls: []records.WorkCall{{Index: 0, Type: "noop"}}}
	benchCodec[records.WorkRequest, *records.WorkRequest](b, req, records.Encode[records.WorkRequest], records.Decode[records.WorkRequest])
}
