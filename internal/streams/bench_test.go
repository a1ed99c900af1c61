package streams_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// The wire records of the hot path, as a no-op atomic batch produces them:
// the token authz queues, the record it keeps, the progress a processor
// writes when the batch finishes, and the terminal callback. The same as
// internal/records' benchmark fixtures.

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

func benchNoopCallback() records.Callback {
	return records.Callback{BatchID: 123456, Domain: "payments", Priority: pipeline.High, Outcome: pipeline.ExecutedOutcome(1),
		Attempts: 1, At: time.Date(2026, 11, 1, 12, 0, 1, 0, time.UTC), Processor: "processor-1"}
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
