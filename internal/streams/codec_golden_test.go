package streams_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/vmihailenco/msgpack/v5"
)

// The golden files under testdata/golden are the encodings of the record
// fixtures as the reflection codec wrote them, before the hand-written
// codecs existed: records already stored in buckets and streams must keep
// decoding, and this build must keep writing the same bytes.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden from the record fixtures (only with the reflection codec)")

func workBatchFixture() streams.WorkBatch {
	zero := streams.WorkRequest{}
	return streams.WorkBatch{Units: []streams.WorkRequest{workRequestFixture(), zero}}
}

func callbackGroupFixture() streams.CallbackGroup {
	full := callbackFixture()
	full.V = streams.WireVersion
	return streams.CallbackGroup{Callbacks: []streams.Callback{full, {V: streams.WireVersion, BatchID: 43, Domain: "payments"}}}
}

func workBatchReplyFixture() streams.WorkBatchReply {
	return streams.WorkBatchReply{Replies: []streams.WorkReply{workReplyFixture(), {Outputs: []pipeline.Output{{Index: 0, Type: "noop"}}, Fresh: true}}}
}

// codecCases are the record cases plus the work batch records, which
// travel only between processors and workers.
func codecCases() []recordCase {
	return append(recordCases(),
		caseFor("WorkBatch", workBatchFixture(), streams.Encode[streams.WorkBatch], streams.Decode[streams.WorkBatch]),
		caseFor("CallbackGroup", callbackGroupFixture(), streams.Encode[streams.CallbackGroup], streams.Decode[streams.CallbackGroup]),
		caseFor("WorkBatchReply", workBatchReplyFixture(), streams.Encode[streams.WorkBatchReply], streams.Decode[streams.WorkBatchReply]),
		caseFor("NoopBatchRecord", benchNoopRecord(), streams.Encode[streams.BatchRecord], streams.Decode[streams.BatchRecord]),
		caseFor("NoopProgress", benchNoopProgress(), streams.Encode[streams.Progress], streams.Decode[streams.Progress]),
		caseFor("NoopCallback", benchNoopCallback(), streams.Encode[streams.Callback], streams.Decode[streams.Callback]),
		caseFor("NoopToken", streams.Token{BatchID: 123456, Batch: new(benchNoopBatch())}, streams.Encode[streams.Token], streams.Decode[streams.Token]),
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
				if want := withVersion(in, streams.WireVersion); !reflect.DeepEqual(out, want) {
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
	got, err := streams.Decode[streams.BatchRecord](old)
	if err != nil {
		t.Fatal(err)
	}
	want := withVersion(canonical(batchRecordFixture()), streams.WireVersion).(streams.BatchRecord)
	want.FinishedAt, want.Outputs = time.Time{}, nil
	want.Batch.RunAt = time.Time{} // nor, from before scheduled batches, a run_at
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
}
