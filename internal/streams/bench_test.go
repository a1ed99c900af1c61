package streams_test

import (
	"testing"

	"github.com/tickflow/tickflow/internal/recordstest"
	"github.com/tickflow/tickflow/internal/streams"
)

// BenchmarkTokenMsg builds the queue message of a batch: body and the
// readable headers (Batch-Id, Domain, Kind, Priority, Gen, Step, Nats-Msg-Id).
func BenchmarkTokenMsg(b *testing.B) {
	bt := recordstest.NoopBatch()
	subject := streams.TokenSubject(bt.Priority, bt.Domain)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := streams.TokenMsg(subject, &bt, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}
