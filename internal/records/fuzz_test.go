package records_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/vmihailenco/msgpack/v5"
)

// The fuzz targets feed arbitrary bytes to each decoder. Their seed corpus
// lives in testdata/fuzz/<FuzzName>/ and is regenerated from the fixtures of
// records_test.go with
//
//	go test ./internal/records -run TestWriteFuzzCorpus -update-corpus
var updateCorpus = flag.Bool("update-corpus", false, "rewrite the seed corpus under testdata/fuzz from the record fixtures")

func FuzzDecodeToken(f *testing.F) {
	fuzzDecode(f, records.Encode[records.Token], records.Decode[records.Token])
}

func FuzzDecodeProgress(f *testing.F) {
	fuzzDecode(f, records.Encode[records.Progress], records.Decode[records.Progress])
}

func FuzzDecodeBatchRecord(f *testing.F) {
	fuzzDecode(f, records.Encode[records.BatchRecord], records.Decode[records.BatchRecord])
}

func FuzzDecodeCallback(f *testing.F) {
	fuzzDecode(f, records.Encode[records.Callback], records.Decode[records.Callback])
}

func FuzzDecodeDeadLetter(f *testing.F) {
	fuzzDecode(f, records.Encode[records.DeadLetter], records.Decode[records.DeadLetter])
}

func FuzzDecodeConfirmation(f *testing.F) {
	fuzzDecode(f, records.Encode[records.Confirmation], records.Decode[records.Confirmation])
}

func FuzzDecodeWorkRequest(f *testing.F) {
	fuzzDecode(f, records.Encode[records.WorkRequest], records.Decode[records.WorkRequest])
}

func FuzzDecodeWorkReply(f *testing.F) {
	fuzzDecode(f, records.Encode[records.WorkReply], records.Decode[records.WorkReply])
}

func FuzzDecodeCompletion(f *testing.F) {
	fuzzDecode(f, records.Encode[records.Completion], records.Decode[records.Completion])
}

func FuzzDecodeUnitGroup(f *testing.F) {
	fuzzDecode(f, records.Encode[records.UnitGroup], records.Decode[records.UnitGroup])
}

// fuzzDecode asserts that any input decodes to a value or to an error
// matching ErrDecode or ErrVersion, and that a decoded value re-encodes to
// bytes that decode again and encode identically.
func fuzzDecode[T any](f *testing.F, enc func(*T) ([]byte, error), dec func([]byte) (T, error)) {
	f.Fuzz(func(t *testing.T, b []byte) {
		// Decode's recover is load-bearing: msgpack v5.4.1 panics on a nil
		// where a time.Time is expected (seeds nil-*), and Decode turns that
		// into ErrDecode.
		v, err := dec(b)
		if err != nil {
			if !errors.Is(err, records.ErrDecode) && !errors.Is(err, records.ErrVersion) {
				t.Fatalf("Decode(%x) = %v, want an error matching ErrDecode or ErrVersion", b, err)
			}
			return
		}
		b1, err := enc(&v)
		if err != nil {
			t.Fatalf("Decode(%x) = %+v, which does not re-encode: %v", b, v, err)
		}
		v2, err := dec(b1)
		if err != nil {
			t.Fatalf("re-encoding %+v gave %x, which does not decode: %v", v, b1, err)
		}
		b2, err := enc(&v2)
		if err != nil {
			t.Fatalf("second re-encoding of %+v: %v", v2, err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not stable across a round trip:\n%x\n%x", b1, b2)
		}
	})
}

// corpusSeeds returns the seed inputs of one record type: its valid
// encodings, a few truncations, and another version.
func corpusSeeds(t *testing.T, rc recordCase) map[string][]byte {
	t.Helper()
	full, err := rc.encode(rc.fixture)
	if err != nil {
		t.Fatal(err)
	}
	zero, err := rc.encode(rc.zero)
	if err != nil {
		t.Fatal(err)
	}
	next, err := msgpack.Marshal(withVersion(rc.fixture, records.WireVersion+1))
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"valid-full":              full,
		"valid-zero":              zero,
		"truncated-half":          full[:len(full)/2],
		"truncated-last-byte":     full[:len(full)-1],
		"truncated-to-header":     full[:1],
		"version-next":            next,
		"empty":                   {},
		"valid-full-trailing-nil": append(append([]byte{}, full...), 0xc0),
	}
}

func corpusDir(rc recordCase) string {
	return filepath.Join("testdata", "fuzz", "FuzzDecode"+rc.name)
}

// TestWriteFuzzCorpus regenerates the checked-in seed corpus; it only runs
// with -update-corpus.
func TestWriteFuzzCorpus(t *testing.T) {
	if !*updateCorpus {
		t.Skip("run with -update-corpus to rewrite testdata/fuzz")
	}
	for _, rc := range recordCases() {
		dir := corpusDir(rc)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range corpusSeeds(t, rc) {
			body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// readCorpusFile parses a one-argument "go test fuzz v1" file.
func readCorpusFile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" ||
		!strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		t.Fatalf("%s is not a one-argument go test fuzz v1 file", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}

// TestFuzzCorpusHasValidSeeds makes sure every fuzz target starts from at
// least one encoding this build decodes, so the re-encode branch is fuzzed:
// a version bump must come with a regenerated corpus.
func TestFuzzCorpusHasValidSeeds(t *testing.T) {
	for _, rc := range recordCases() {
		t.Run(rc.name, func(t *testing.T) {
			files, err := filepath.Glob(filepath.Join(corpusDir(rc), "*"))
			if err != nil || len(files) == 0 {
				t.Fatalf("no seed corpus in %s (%v): run go test ./internal/records -run TestWriteFuzzCorpus -update-corpus", corpusDir(rc), err)
			}
			valid := 0
			for _, f := range files {
				if _, err := rc.decode(readCorpusFile(t, f)); err == nil {
					valid++
				}
			}
			if valid == 0 {
				t.Fatalf("none of the %d seeds in %s decodes: regenerate with -update-corpus", len(files), corpusDir(rc))
			}
		})
	}
}
