package pipeline_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/wire/wiretest"
	"github.com/tickflow/tickflow/pipeline"
)

// Shadow types: the same fields and tags without the hand-written codec,
// so msgpack/v5 encodes them by reflection.
type (
	batchReflect        pipeline.Batch
	functionReflect     pipeline.Function
	subroutineReflect   pipeline.Subroutine
	retryLogicReflect   pipeline.RetryLogic
	backoffReflect      pipeline.Backoff
	confirmationReflect pipeline.Confirmation
	inclusionReflect    pipeline.Inclusion
	outcomeReflect      pipeline.Outcome
	outputReflect       pipeline.Output
	failureReflect      pipeline.Failure
)

// codecTime is a fixture time in time.Local, as msgpack decodes times.
func codecTime(minute int) time.Time {
	return time.Date(2026, 11, 1, 12, minute, 30, 123456789, time.Local)
}

func codecRetry() *pipeline.RetryLogic {
	return &pipeline.RetryLogic{
		Times: 5,
		Backoff: pipeline.Backoff{Kind: pipeline.Exponential, Initial: pipeline.Duration(time.Second),
			Increment: pipeline.Duration(2 * time.Second), Multiplier: 1.5, Max: pipeline.Duration(time.Minute)},
		Jitter:       pipeline.Duration(250 * time.Millisecond),
		NonRetryable: []string{"invalid_input"},
		RetryOn:      []string{"timeout", "unavailable"},
	}
}

func codecFunction() pipeline.Function {
	return pipeline.Function{
		Type:      "ledger.transfer",
		Payload:   pipeline.MustPayload(map[string]any{"amount": 10}),
		Retry:     codecRetry(),
		Confirm:   &pipeline.Confirmation{Expect: "block 7", Timeout: pipeline.Duration(time.Minute), By: []string{"oracle"}},
		Sender:    true,
		Inclusion: &pipeline.Inclusion{PollEvery: pipeline.Duration(time.Second), MaxWait: pipeline.Duration(time.Minute), By: []string{"oracle"}},
	}
}

func codecBatch() pipeline.Batch {
	return pipeline.Batch{
		ID: 1 << 40, Domain: "payments", Label: "retail", Submitter: "alice",
		Functions:  []pipeline.Function{codecFunction(), {Type: "noop"}},
		Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic, Retry: codecRetry()},
		Priority:   pipeline.High, Key: "acct-1", ExpiresAt: codecTime(30), CreatedAt: codecTime(1), ReplayOf: 41, RunAt: codecTime(20),
	}
}

// TestCodecMatchesReflection proves each hand-written codec of the
// pipeline types wire-compatible with msgpack/v5's reflection, both ways,
// over populated, zero and empty-but-not-nil values.
func TestCodecMatchesReflection(t *testing.T) {
	forever := codecRetry()
	forever.Times = pipeline.Forever
	t.Run("Batch", func(t *testing.T) {
		wiretest.Check[pipeline.Batch, batchReflect](t, codecBatch())
		wiretest.Check[pipeline.Batch, batchReflect](t, pipeline.Batch{})
		wiretest.Check[pipeline.Batch, batchReflect](t, pipeline.Batch{Functions: []pipeline.Function{}, CreatedAt: codecTime(2)})
		far := codecBatch()
		far.ExpiresAt = time.Date(2600, 1, 1, 0, 0, 0, 0, time.Local) // the 12-byte time encoding
		far.CreatedAt = time.Unix(1700000000, 0).Local()              // the 4-byte one
		wiretest.Check[pipeline.Batch, batchReflect](t, far)
	})
	t.Run("Function", func(t *testing.T) {
		wiretest.Check[pipeline.Function, functionReflect](t, codecFunction())
		wiretest.Check[pipeline.Function, functionReflect](t, pipeline.Function{})
		wiretest.Check[pipeline.Function, functionReflect](t, pipeline.Function{Type: "noop", Retry: forever})
	})
	t.Run("Subroutine", func(t *testing.T) {
		wiretest.Check[pipeline.Subroutine, subroutineReflect](t, pipeline.Subroutine{Mode: pipeline.Atomic, Retry: forever})
		wiretest.Check[pipeline.Subroutine, subroutineReflect](t, pipeline.Subroutine{})
	})
	t.Run("RetryLogic", func(t *testing.T) {
		wiretest.Check[pipeline.RetryLogic, retryLogicReflect](t, *codecRetry())
		wiretest.Check[pipeline.RetryLogic, retryLogicReflect](t, *forever)
		wiretest.Check[pipeline.RetryLogic, retryLogicReflect](t, pipeline.RetryLogic{})
		wiretest.Check[pipeline.RetryLogic, retryLogicReflect](t, pipeline.RetryLogic{Times: 300, NonRetryable: []string{}, RetryOn: []string{""}})
	})
	t.Run("Backoff", func(t *testing.T) {
		wiretest.Check[pipeline.Backoff, backoffReflect](t, codecRetry().Backoff)
		wiretest.Check[pipeline.Backoff, backoffReflect](t, pipeline.Backoff{})
		wiretest.Check[pipeline.Backoff, backoffReflect](t, pipeline.Backoff{Kind: pipeline.Fixed, Initial: pipeline.Duration(-time.Hour)})
	})
	t.Run("Confirmation", func(t *testing.T) {
		wiretest.Check[pipeline.Confirmation, confirmationReflect](t, *codecFunction().Confirm)
		wiretest.Check[pipeline.Confirmation, confirmationReflect](t, pipeline.Confirmation{})
	})
	t.Run("Inclusion", func(t *testing.T) {
		wiretest.Check[pipeline.Inclusion, inclusionReflect](t, *codecFunction().Inclusion)
		wiretest.Check[pipeline.Inclusion, inclusionReflect](t, pipeline.Inclusion{})
	})
	t.Run("Outcome", func(t *testing.T) {
		wiretest.Check[pipeline.Outcome, outcomeReflect](t, pipeline.FailedAfter(3, "card declined"))
		wiretest.Check[pipeline.Outcome, outcomeReflect](t, pipeline.Outcome{Executed: -40000})
		wiretest.Check[pipeline.Outcome, outcomeReflect](t, pipeline.Outcome{})
	})
	t.Run("Output", func(t *testing.T) {
		wiretest.Check[pipeline.Output, outputReflect](t, pipeline.Output{Index: 2, Type: "ledger.transfer",
			Data: pipeline.MustPayload([]any{1, "two", 3.5}), Ref: "0xabc"})
		wiretest.Check[pipeline.Output, outputReflect](t, pipeline.Output{})
		wiretest.Check[pipeline.Output, outputReflect](t, pipeline.Output{Index: 1, Data: pipeline.MustPayload(nil)})
	})
	t.Run("Failure", func(t *testing.T) {
		wiretest.Check[pipeline.Failure, failureReflect](t, pipeline.Failure{BatchID: 42, Index: 1, Key: "acct-1",
			CreatedAt: codecTime(1), Failures: 4, LastError: "timeout", Exhausted: true})
		wiretest.Check[pipeline.Failure, failureReflect](t, pipeline.Failure{})
	})
}

// FuzzReadBatch feeds arbitrary bytes to the batch reader, which a token
// of every queue carries: it never panics, and what it reads re-encodes to
// bytes that read back the same.
func FuzzReadBatch(f *testing.F) {
	for _, b := range []pipeline.Batch{codecBatch(), {}, {Functions: []pipeline.Function{{Type: "noop"}}}} {
		enc := b.AppendMsgpack(nil)
		f.Add(enc)
		f.Add(enc[:len(enc)/2])
	}
	f.Add([]byte{0xdf, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		var b pipeline.Batch
		if _, err := b.ReadMsgpack(data); err != nil {
			return
		}
		first := b.AppendMsgpack(nil)
		var again pipeline.Batch
		if _, err := again.ReadMsgpack(first); err != nil {
			t.Fatalf("re-encoding %x does not read back: %v", first, err)
		}
		if second := again.AppendMsgpack(nil); string(second) != string(first) {
			t.Fatalf("encoding not stable across a round trip:\n%x\n%x", first, second)
		}
	})
}
