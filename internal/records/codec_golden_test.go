package records_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// The golden files under testdata/golden are the encodings of the record
// fixtures as the reflection codec wrote them, before the hand-written
// codecs existed: records already stored in buckets and streams must keep
// decoding, and this build must keep writing the same bytes.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the record fixtures (only with the reflection codec)")

func workBatchFixture() records.WorkBatch {
	zero := records.WorkRequest{}
	return records.WorkBatch{Units: []records.WorkRequest{workRequestFixture(), zero}}
}

func callbackGroupFixture() records.CallbackGroup {
	full := callbackFixture()
	full.V = records.WireVersion
	return records.CallbackGroup{Callbacks: []records.Callback{full, {V: records.WireVersion, BatchID: 43, Domain: "payments"}}}
}

func workBatchReplyFixture() records.WorkBatchReply {
	return records.WorkBatchReply{Replies: []records.WorkReply{workReplyFixture(), {Outputs: []pipeline.Output{{Index: 0, Type: "noop"}}, Fresh: true}}}
}

// codecCases are the record cases plus the work batch records, which
// travel only between processors and workers.
func codecCases() []recordCase {
	return append(recordCases(),
		caseFor("WorkBatch", workBatchFixture(), records.Encode[records.WorkBatch], records.Decode[records.WorkBatch]),
		caseFor("CallbackGroup", callbackGroupFixture(), records.Encode[records.CallbackGroup], records.Decode[records.CallbackGroup]),
		caseFor("WorkBatchReply", workBatchReplyFixture(), records.Encode[records.WorkBatchReply], records.Decode[records.WorkBatchReply]),
		caseFor("NoopBatchRecord", benchNoopRecord(), records.Encode[records.BatchRecord], records.Decode[records.BatchRecord]),
		caseFor("NoopProgress", benchNoopProgress(), records.Encode[records.Progress], records.Decode[records.Progress]),
		caseFor("NoopCallback", benchNoopCallback(), records.Encode[records.Callback], records.Decode[records.Callback]),
		caseFor("NoopToken", records.Token{BatchID: 123456, Batch: new(benchNoopBatch())}, records.Encode[records.Token], records.Decode[records.Token]),
	)
}

func goldenPath(name, variant string) string {
	return filepath.Join("testdata", "golden", name+"-"+variant+".msgpack")
}

// TestGoldenEncodings decodes what the reflection codec wrote into the
// fixtures, and encodes the fixtures into the very same bytes.
func TestGoldenEncodings(t *testing.T) {
	for _, rc := range codecCases() {
		t.Run(rc.name, func(t *testing.T) {
			for variant, in := range map[string]any{"full": canonical(rc.fixture), "zero": rc.zero} {
				got, err := rc.encode(in)
				if err != nil {
					t.Fatalf("%s: Encode: %v", variant, err)
				}
				path := goldenPath(rc.name, variant)
				if *updateGolden {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				golden, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, golden) {
					t.Errorf("%s: Encode wrote\n%x\nthe reflection codec wrote\n%x", variant, got, golden)
				}
				out, err := rc.decode(golden)
				if err != nil {
					t.Fatalf("%s: Decode(%x): %v", variant, golden, err)
				}
				if want := withVersion(in, records.WireVersion); !reflect.DeepEqual(out, want) {
					t.Errorf("%s: Decode of the reflection codec's bytes:\n got %+v\nwant %+v", variant, out, want)
				}
			}
		})
	}
}

// canonical returns a copy of record v whose encoding is deterministic
// and whose decoding is deep-equal to it: every payload re-encoded with its
// map keys sorted, every non-zero time in time.Local (as msgpack decodes it).
func canonical(v any) any {
	p := reflect.New(reflect.TypeOf(v))
	p.Elem().Set(reflect.ValueOf(v))
	canonicalize(p.Elem())
	return p.Elem().Interface()
}

func canonicalize(v reflect.Value) {
	switch {
	case v.Type() == reflect.TypeFor[time.Time]():
		if t := v.Interface().(time.Time); !t.IsZero() {
			v.Set(reflect.ValueOf(t.Local()))
		}
		return
	case v.Type() == reflect.TypeFor[pipeline.Payload]():
		if v.Len() == 0 {
			return
		}
		var x any
		if err := msgpack.Unmarshal(v.Bytes(), &x); err != nil {
			panic(err)
		}
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		enc.SetSortMapKeys(true)
		if err := enc.Encode(x); err != nil {
			panic(err)
		}
		v.SetBytes(buf.Bytes())
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			c := reflect.New(v.Type().Elem())
			c.Elem().Set(v.Elem())
			canonicalize(c.Elem())
			v.Set(c)
		}
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := range c.Len() {
			canonicalize(c.Index(i))
		}
		v.Set(c)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				canonicalize(v.Field(i))
			}
		}
	}
}

// TestBatchRecordBeforeFinishedAt: a batch record stored before records
// carried finished_at (the reflection codec's bytes) still decodes, with
// no finish time (it expires its full age after its next write), from
// before records kept outputs, none, and no run_at.
func TestBatchRecordBeforeFinishedAt(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "BatchRecord-before-finished_at.msgpack"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := records.Decode[records.BatchRecord](old)
	if err != nil {
		t.Fatal(err)
	}
	want := withVersion(canonical(batchRecordFixture()), records.WireVersion).(records.BatchRecord)
	want.FinishedAt, want.Outputs = time.Time{}, nil
	want.Batch.RunAt = time.Time{} // nor, from before scheduled batches, a run_at
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
}
