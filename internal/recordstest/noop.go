// Package recordstest holds the wire records of the hot path as a no-op
// atomic batch produces them, shared by the benchmarks of the records'
// codecs and of the messages built from them: the token's batch, the
// record authz keeps, the progress a processor writes when the batch
// finishes, and the terminal callback.
package recordstest

import (
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

// NoopBatch is a one-function atomic batch of the no-op type.
func NoopBatch() pipeline.Batch {
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	return pipeline.Batch{
		ID: 123456, Domain: "payments", Label: "transfer", Submitter: "alice", Priority: pipeline.High,
		Functions:  []pipeline.Function{{Type: "noop"}},
		Subroutine: pipeline.Subroutine{Mode: pipeline.Atomic},
		CreatedAt:  now,
	}
}

// NoopRecord is NoopBatch's record as authz first writes it.
func NoopRecord() records.BatchRecord {
	b := NoopBatch()
	return records.BatchRecord{Batch: b, Status: pipeline.InProcess, CreatedAt: b.CreatedAt, UpdatedAt: b.CreatedAt,
		History: []records.Event{{At: b.CreatedAt, What: "accepted", Detail: "high queue of payments"}}}
}

// NoopProgress is NoopBatch's progress once it finished.
func NoopProgress() records.Progress {
	o := pipeline.ExecutedOutcome(1)
	return records.Progress{BatchID: 123456, State: records.Done, Next: 1, Outputs: []pipeline.Output{{Index: 0, Type: "noop"}},
		Outcome: &o, UpdatedAt: time.Date(2026, 11, 1, 12, 0, 1, 0, time.UTC)}
}

// NoopCallback is NoopBatch's terminal callback.
func NoopCallback() records.Callback {
	return records.Callback{BatchID: 123456, Domain: "payments", Priority: pipeline.High, Outcome: pipeline.ExecutedOutcome(1),
		Attempts: 1, At: time.Date(2026, 11, 1, 12, 0, 1, 0, time.UTC), Processor: "processor-1"}
}
