package records_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// at is a fixture time. msgpack decodes every time in time.Local, so the
// fixtures use Local too and compare with reflect.DeepEqual.
func at(minute int) time.Time {
	return time.Date(2026, 11, 1, 12, minute, 30, 123456789, time.Local)
}

func fullRetry() *pipeline.RetryLogic {
	return &pipeline.RetryLogic{
		Times: pipeline.Forever,
		Backoff: pipeline.Backoff{
			Kind: pipeline.Exponential, Initial: pipeline.Duration(time.Second),
			Increment: pipeline.Duration(2 * time.Second), Multiplier: 1.5, Max: pipeline.Duration(time.Minute),
		},
		Jitter:       pipeline.Duration(250 * time.Millisecond),
		NonRetryable: []string{"invalid_input"},
		RetryOn:      []string{"timeout", "unavailable"},
	}
}

func fullOutputs() []pipeline.Output {
	return []pipeline.Output{
		{Index: 1, Type: "ledger.transfer", Data: pipeline.MustPayload(map[string]any{"tx": "abc", "ok": true}), Ref: "0xabc"},
		{Index: 2, Type: "ledger.notify", Data: pipeline.MustPayload([]any{1, "two", 3.5})},
	}
}

func fullOutcome() *pipeline.Outcome {
	return &pipeline.Outcome{Status: pipeline.PartiallyExecuted, Executed: 2, Reason: "card declined"}
}

func fullBatch() pipeline.Batch {
	return pipeline.Batch{
		ID: 42, Domain: "payments", Label: "retail", Submitter: "alice",
		Functions: []pipeline.Function{{
			Type:    "ledger.transfer",
			Payload: pipeline.MustPayload(map[string]any{"amount": 10, "to": "bob"}),
			Retry:   fullRetry(),
			Confirm: &pipeline.Confirmation{Expect: "block 7", Timeout: pipeline.Duration(time.Minute), By: []string{"oracle"}},
			Sender:  true,
			Inclusion: &pipeline.Inclusion{PollEvery: pipeline.Duration(time.Second), MaxWait: pipeline.Duration(time.Minute),
				By: []string{"oracle"}},
		}},
		Subroutine: pipeline.Subroutine{Mode: pipeline.NonAtomic, Retry: fullRetry()},
		Priority:   pipeline.High,
		Key:        "acct-1",
		ExpiresAt:  at(30),
		CreatedAt:  at(1),
		ReplayOf:   41,
		RunAt:      at(20),
	}
}

// Fixtures with every field set, so a round trip covers every field; the
// V field is left to Encode.

func tokenFixture() records.Token {
	b := batchRecordFixture().Batch
	return records.Token{BatchID: 42, Gen: 3, Rotation: 9, Batch: &b, Again: true}
}

func progressFixture() records.Progress {
	return records.Progress{
		BatchID: 42, Gen: 3, Rotation: 9, State: records.Parked, Next: 2,
		Failures:    []int{1, 2, 1},
		Rounds:      []int{1, 1},
		LastError:   "gateway timeout",
		Parked:      &records.ParkedFunction{Index: 1, Deadline: at(5), Output: fullOutputs()[0], Timer: 17, Included: true},
		NotBefore:   at(6),
		FailedIndex: 2,
		Fallbacks:   []int{1},
		FallbackDue: &records.DueFallback{Index: 2, Exhausted: true, Reason: "declined"},
		Waiting:     &records.Waiting{Reason: "no worker serves `greet`", Since: at(4), Type: "greet"},
		Outputs:     fullOutputs(),
		Outcome:     fullOutcome(),
		UpdatedAt:   at(7),
		By:          "processor-2",
	}
}

func batchRecordFixture() records.BatchRecord {
	return records.BatchRecord{
		Batch: fullBatch(), Status: pipeline.PartiallyExecuted, Outcome: fullOutcome(),
		IdempotencyKey: "idem-1", Attempts: 4, Fallback: true, DeadLetter: 17, ReplayedAs: 43,
		Outputs: fullOutputs(), CreatedAt: at(1), UpdatedAt: at(8), FinishedAt: at(8),
		History: []records.Event{{At: at(1), What: "accepted", Detail: "by alice"}, {At: at(8), What: "callback", Detail: "PartiallyExecuted(2)"}},
	}
}

func callbackFixture() records.Callback {
	return records.Callback{
		BatchID: 42, Domain: "payments", Priority: pipeline.Med, Outcome: *fullOutcome(),
		Attempts: 4, At: at(9), Processor: "proc-1", Fallback: true, DeadLetter: 17,
		Outputs: fullOutputs(),
		Trace:   map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
}

func deadLetterFixture() records.DeadLetter {
	return records.DeadLetter{
		Batch: fullBatch(), Domain: "payments", Index: 1, Error: "card declined", Attempts: 4,
		Outcome: *fullOutcome(), Outputs: fullOutputs(),
		Origin:   records.Origin{Stream: "HIGH", Subject: "batches.high.payments.42", Seq: 77},
		At:       at(10),
		Callback: []byte("\x81\xa2id\x2a"),
	}
}

func confirmationFixture() records.Confirmation {
	return records.Confirmation{Content: "block 7", By: "oracle", Ref: "0xabc"}
}

func workRequestFixture() records.WorkRequest {
	return records.WorkRequest{
		BatchID: 42, Domain: "payments", Key: "acct-1", CreatedAt: at(1), Submitter: "alice", Label: "transfer",
		Attempt: 3, Round: 1, Unit: true,
		Calls: []records.WorkCall{
			{Index: 1, Type: "ledger.transfer", Payload: pipeline.MustPayload(map[string]any{"amount": 10})},
			{Index: 2, Type: "ledger.notify", Payload: pipeline.MustPayload("hi")},
		},
		Inputs: fullOutputs(),
		Retry:  fullRetry(),
		Failure: &pipeline.Failure{
			BatchID: 42, Index: 1, Key: "acct-1", CreatedAt: at(1), Failures: 4, LastError: "timeout", Exhausted: true,
		},
		Sender:    "sender-a",
		Inclusion: &records.InclusionCall{Ref: "0xabc", Hook: records.HookSuccess, Output: &fullOutputs()[0]},
		Trace:     map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	}
}

func workReplyFixture() records.WorkReply {
	return records.WorkReply{
		Outputs: fullOutputs(),
		Error: &records.WorkError{
			Message: "card declined", Codes: []string{"declined", "payment"}, Permanent: true,
			Retryable: true, Index: 2, NoFallback: true, Busy: true, NoHook: true,
		},
		Recorded: true,
		Fresh:    true,
		Included: true,
	}
}

func completionFixture() records.Completion {
	return records.Completion{Running: true, Until: at(9), Worker: "worker-1", Outputs: fullOutputs()}
}

func unitGroupFixture() records.UnitGroup {
	return records.UnitGroup{Units: []records.UnitEntry{
		{Key: "128.unit.0", Running: true, Released: true, Own: true, Claim: 1<<63 + 7, Until: at(9), Worker: "worker-1", Outputs: fullOutputs()},
		{Key: "129.unit.1", Claim: 3, Until: at(10), Worker: "worker-2"},
	}}
}

// recordCase is one wire record type, erased so that the types can share a table.
type recordCase struct {
	name string
	// fixture is the record with every field set.
	fixture any
	// encode and decode are records.Encode and records.Decode for the type.
	encode func(v any) ([]byte, error)
	decode func(b []byte) (any, error)
	// zero is the zero record of the type, for the minimal encodings.
	zero any
}

func caseFor[T any](name string, fixture T, enc func(*T) ([]byte, error), dec func([]byte) (T, error)) recordCase {
	return recordCase{
		name:    name,
		fixture: fixture,
		encode: func(v any) ([]byte, error) {
			t := v.(T)
			return enc(&t)
		},
		decode: func(b []byte) (any, error) { return dec(b) },
		zero:   *new(T),
	}
}

func recordCases() []recordCase {
	return []recordCase{
		caseFor("Token", tokenFixture(), records.Encode[records.Token], records.Decode[records.Token]),
		caseFor("Progress", progressFixture(), records.Encode[records.Progress], records.Decode[records.Progress]),
		caseFor("BatchRecord", batchRecordFixture(), records.Encode[records.BatchRecord], records.Decode[records.BatchRecord]),
		caseFor("Callback", callbackFixture(), records.Encode[records.Callback], records.Decode[records.Callback]),
		caseFor("DeadLetter", deadLetterFixture(), records.Encode[records.DeadLetter], records.Decode[records.DeadLetter]),
		caseFor("Confirmation", confirmationFixture(), records.Encode[records.Confirmation], records.Decode[records.Confirmation]),
		caseFor("WorkRequest", workRequestFixture(), records.Encode[records.WorkRequest], records.Decode[records.WorkRequest]),
		caseFor("WorkReply", workReplyFixture(), records.Encode[records.WorkReply], records.Decode[records.WorkReply]),
		caseFor("Completion", completionFixture(), records.Encode[records.Completion], records.Decode[records.Completion]),
		caseFor("UnitGroup", unitGroupFixture(), records.Encode[records.UnitGroup], records.Decode[records.UnitGroup]),
	}
}

// withVersion returns a copy of record v (a struct) with its V field set.
func withVersion(v any, version uint8) any {
	p := reflect.New(reflect.TypeOf(v))
	p.Elem().Set(reflect.ValueOf(v))
	p.Elem().FieldByName("V").SetUint(uint64(version))
	return p.Elem().Interface()
}

// zeroFields lists the fields of v left at their zero value, descending
// into structs, pointers and the first element of slices. Fields the codec
// never carries (msgpack:"-") and the top-level V are skipped.
func zeroFields(v reflect.Value, path string) []string {
	if v.Type() == reflect.TypeFor[time.Time]() {
		if v.Interface().(time.Time).IsZero() {
			return []string{path}
		}
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return []string{path}
		}
		return zeroFields(v.Elem(), path)
	case reflect.Slice:
		if v.Len() == 0 {
			return []string{path}
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil
		}
		return zeroFields(v.Index(0), path+"[0]")
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if f.Tag.Get("msgpack") == "-" || (path == "" && f.Name == "V") {
				continue
			}
			out = append(out, zeroFields(v.Field(i), path+"."+f.Name)...)
		}
		return out
	default:
		if v.IsZero() {
			return []string{path}
		}
		return nil
	}
}

// TestFixturesSetEveryField keeps the round trip honest: a field added to a
// record without a value in its fixture is a field no test encodes.
func TestFixturesSetEveryField(t *testing.T) {
	for _, rc := range recordCases() {
		t.Run(rc.name, func(t *testing.T) {
			if zero := zeroFields(reflect.ValueOf(rc.fixture), ""); len(zero) > 0 {
				t.Fatalf("%s fixture leaves %s at the zero value: set them in records_test.go", rc.name, strings.Join(zero, ", "))
			}
		})
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, rc := range recordCases() {
		t.Run(rc.name, func(t *testing.T) {
			for _, in := range []any{rc.fixture, rc.zero} {
				b, err := rc.encode(in)
				if err != nil {
					t.Fatalf("Encode: %v", err)
				}
				out, err := rc.decode(b)
				if err != nil {
					t.Fatalf("Decode(%x): %v", b, err)
				}
				want := withVersion(in, records.WireVersion)
				if !reflect.DeepEqual(out, want) {
					t.Fatalf("round trip changed the record:\n got %+v\nwant %+v", out, want)
				}
			}
		})
	}
}

func TestEncodeStampsTheVersion(t *testing.T) {
	tok := records.Token{V: 9, BatchID: 1}
	b, err := records.Encode(&tok)
	if err != nil {
		t.Fatal(err)
	}
	if tok.V != records.WireVersion {
		t.Fatalf("Encode left V = %d, want %d", tok.V, records.WireVersion)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(m["v"]) != fmt.Sprint(records.WireVersion) {
		t.Fatalf("encoded v = %v, want %d", m["v"], records.WireVersion)
	}
}

func TestDecodeRejectsOtherVersions(t *testing.T) {
	for _, rc := range recordCases() {
		for _, v := range []uint8{0, records.WireVersion + 1, 255} {
			t.Run(fmt.Sprintf("%s/v%d", rc.name, v), func(t *testing.T) {
				// Marshal directly: Encode would stamp the current version.
				b, err := msgpack.Marshal(withVersion(rc.fixture, v))
				if err != nil {
					t.Fatal(err)
				}
				_, err = rc.decode(b)
				if !errors.Is(err, records.ErrVersion) {
					t.Fatalf("Decode of version %d = %v, want ErrVersion", v, err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("version %d", v)) {
					t.Errorf("error %q does not say which version it met", err)
				}
			})
		}
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	garbage := []struct {
		name string
		b    []byte
	}{
		{name: "empty", b: nil},
		{name: "reserved byte", b: []byte{0xc1}},
		{name: "plain text", b: []byte("hello, world")},
		{name: "JSON", b: []byte(`{"v":1,"id":42}`)},
		{name: "string instead of a map", b: []byte{0xa3, 'a', 'b', 'c'}},
		{name: "map with a truncated key", b: []byte{0x81, 0xa5, 'v'}},
		{name: "version of the wrong type", b: []byte{0x81, 0xa1, 'v', 0xa3, 'o', 'n', 'e'}},
		{name: "map announcing more entries than it has", b: []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01}},
	}
	for _, rc := range recordCases() {
		for _, g := range garbage {
			t.Run(rc.name+"/"+g.name, func(t *testing.T) {
				if _, err := rc.decode(g.b); !errors.Is(err, records.ErrDecode) {
					t.Fatalf("Decode(%x) = %v, want ErrDecode", g.b, err)
				}
			})
		}
		t.Run(rc.name+"/every truncation", func(t *testing.T) {
			b, err := rc.encode(rc.fixture)
			if err != nil {
				t.Fatal(err)
			}
			for n := range len(b) {
				if _, err := rc.decode(b[:n]); !errors.Is(err, records.ErrDecode) {
					t.Fatalf("Decode of the first %d of %d bytes = %v, want ErrDecode", n, len(b), err)
				}
			}
		})
	}
}

// TestDecodeIgnoresUnknownFields lets a newer build add a field without a
// version bump: older readers skip it.
func TestDecodeIgnoresUnknownFields(t *testing.T) {
	type tokenV1Plus struct {
		V       uint8  `msgpack:"v"`
		BatchID uint64 `msgpack:"id"`
		Gen     uint32 `msgpack:"gen"`
		Step    uint32 `msgpack:"step"`
		Lane    string `msgpack:"lane"`
	}
	b, err := msgpack.Marshal(tokenV1Plus{V: records.WireVersion, BatchID: 5, Gen: 1, Step: 2, Lane: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := records.Decode[records.Token](b)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if want := (records.Token{V: records.WireVersion, BatchID: 5, Gen: 1, Rotation: 2}); got != want {
		t.Fatalf("Decode = %+v, want %+v", got, want)
	}
}

func TestProgressCounters(t *testing.T) {
	var p records.Progress
	if p.FailuresOf(0) != 0 || p.FailuresOf(-1) != 0 || p.Attempts(false) != 0 {
		t.Fatalf("zero progress: FailuresOf(0)=%d FailuresOf(-1)=%d Attempts()=%d", p.FailuresOf(0), p.FailuresOf(-1), p.Attempts(false))
	}
	if n := p.AddFailure(2); n != 1 {
		t.Fatalf("AddFailure(2) = %d, want 1", n)
	}
	if n := p.AddFailure(2); n != 2 {
		t.Fatalf("AddFailure(2) again = %d, want 2", n)
	}
	p.AddFailure(0)
	p.Next = 3
	if got := p.Failures; !reflect.DeepEqual(got, []int{1, 0, 2}) {
		t.Fatalf("Failures = %v, want [1 0 2]", got)
	}
	if p.FailuresOf(2) != 2 || p.FailuresOf(5) != 0 {
		t.Fatalf("FailuresOf(2)=%d FailuresOf(5)=%d, want 2 and 0", p.FailuresOf(2), p.FailuresOf(5))
	}
	if got := p.Attempts(false); got != 6 {
		t.Fatalf("Attempts(false) = %d, want 3 successes + 3 failures = 6", got)
	}
	if got := p.Attempts(true); got != 4 {
		t.Fatalf("Attempts(true) = %d, want 1 successful unit + 3 failures = 4", got)
	}
}

// TestDecodeNilTime covers a msgpack v5.4.1 panic that fuzzing found: a nil
// where a time.Time is expected panics inside msgpack ("reflect: call of
// reflect.Value.IsNil on struct Value"). Decode must still return rather
// than panic: either an ErrDecode or the zero time.
func TestDecodeNilTime(t *testing.T) {
	tests := []struct {
		name   string
		record map[string]any
		decode func([]byte) error
	}{
		{name: "Progress.UpdatedAt", record: map[string]any{"v": 1, "updated_at": nil},
			decode: func(b []byte) error { _, err := records.Decode[records.Progress](b); return err }},
		{name: "Progress.Parked.Deadline", record: map[string]any{"v": 1, "parked": map[string]any{"deadline": nil}},
			decode: func(b []byte) error { _, err := records.Decode[records.Progress](b); return err }},
		{name: "WorkRequest.CreatedAt", record: map[string]any{"v": 1, "created_at": nil},
			decode: func(b []byte) error { _, err := records.Decode[records.WorkRequest](b); return err }},
		{name: "Callback.At", record: map[string]any{"v": 1, "at": nil},
			decode: func(b []byte) error { _, err := records.Decode[records.Callback](b); return err }},
		{name: "BatchRecord.Batch.CreatedAt", record: map[string]any{"v": 1, "batch": map[string]any{"created_at": nil}},
			decode: func(b []byte) error { _, err := records.Decode[records.BatchRecord](b); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := msgpack.Marshal(tt.record)
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.decode(b); err != nil && !errors.Is(err, records.ErrDecode) {
				t.Fatalf("Decode(%x) = %v, want nil or ErrDecode", b, err)
			}
		})
	}
}
