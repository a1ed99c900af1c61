// Package storetest is the conformance suite for steps.RunStore
// implementations: every implementation, the in-memory fake included, must
// pass TestRunStore, so that a fake cannot drift from the real thing.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tickflow/tickflow/x/steps"
)

// TestRunStore runs the conformance suite against the stores newStore
// returns. newStore is called once per subtest and must return an empty
// store; register any cleanup with t.Cleanup. Subtests run sequentially.
func TestRunStore(t *testing.T, newStore func(t *testing.T) steps.RunStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s steps.RunStore)
	}{
		{"LatestRunMissing", testLatestRunMissing},
		{"RunRoundTrip", testRunRoundTrip},
		{"LatestRunIsLastSaved", testLatestRunIsLastSaved},
		{"RunsKeyedByProcessorAndSubject", testRunsKeyed},
		{"AwkwardKeys", testAwkwardKeys},
		{"RecordNotRetained", testRecordNotRetained},
		{"StepOutputMissing", testStepOutputMissing},
		{"StepOutputRoundTrip", testStepOutputRoundTrip},
		{"StepOutputKeyedByRunAndStep", testStepOutputKeyed},
		{"StepOutputReplaced", testStepOutputReplaced},
		{"StepOutputNotAliased", testStepOutputNotAliased},
		{"LargeStepOutput", testLargeStepOutput},
		{"Concurrent", testConcurrent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newStore(t)) })
	}
}

func record(processor, subject, runID string) *steps.RunRecord {
	return &steps.RunRecord{
		RunID:      runID,
		Processor:  processor,
		SubjectID:  subject,
		InputHash:  "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Success:    false,
		FailedStep: steps.StepExtraction,
		Context: steps.ExecutionContext{
			ParentRunID:   "parent-" + runID,
			PreviousRunID: "previous-" + runID,
			LastErrorStep: steps.StepExtraction,
			RetryCount:    2,
			Metadata:      map[string]any{"input_hash": "abc", "resume_step": "extraction", "tenant": "t1"},
		},
		Timestamp:  time.Date(2025, 9, 3, 7, 13, 59, 334061000, time.UTC),
		DurationMS: 100,
	}
}

func equalRecords(t *testing.T, got, want *steps.RunRecord) {
	t.Helper()
	if got == nil {
		t.Fatalf("record = nil, want %+v", want)
	}
	if !got.Timestamp.Equal(want.Timestamp) {
		t.Errorf("Timestamp = %v, want %v", got.Timestamp, want.Timestamp)
	}
	g, w := *got, *want
	g.Timestamp, w.Timestamp = time.Time{}, time.Time{}
	// A store may return no metadata as nil or as an empty map.
	if len(g.Context.Metadata) == 0 {
		g.Context.Metadata = nil
	}
	if len(w.Context.Metadata) == 0 {
		w.Context.Metadata = nil
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("record =\n%#v\nwant\n%#v", g, w)
	}
}

func mustSave(t *testing.T, s steps.RunStore, rec *steps.RunRecord) {
	t.Helper()
	if err := s.SaveRun(t.Context(), rec); err != nil {
		t.Fatalf("SaveRun(%s, %s): %v", rec.Processor, rec.SubjectID, err)
	}
}

func mustLatest(t *testing.T, s steps.RunStore, processor, subject string) *steps.RunRecord {
	t.Helper()
	rec, err := s.LatestRun(t.Context(), processor, subject)
	if err != nil {
		t.Fatalf("LatestRun(%s, %s): %v", processor, subject, err)
	}
	return rec
}

func mustOutput(t *testing.T, s steps.RunStore, runID string, step steps.Step) []byte {
	t.Helper()
	data, err := s.StepOutput(t.Context(), runID, step)
	if err != nil {
		t.Fatalf("StepOutput(%s, %s): %v", runID, step, err)
	}
	return data
}

func testLatestRunMissing(t *testing.T, s steps.RunStore) {
	_, err := s.LatestRun(t.Context(), "p_x", "UW-1")
	if !errors.Is(err, steps.ErrNotFound) {
		t.Fatalf("LatestRun on an empty store: err = %v, want ErrNotFound", err)
	}
}

func testRunRoundTrip(t *testing.T, s steps.RunStore) {
	want := record("p_x", "UW-1", "run-1")
	mustSave(t, s, want)
	equalRecords(t, mustLatest(t, s, "p_x", "UW-1"), record("p_x", "UW-1", "run-1"))

	ok := &steps.RunRecord{RunID: "run-2", Processor: "p_x", SubjectID: "UW-2", Success: true,
		Context: steps.ExecutionContext{ParentRunID: "run-2"}, Timestamp: time.Unix(0, 0).UTC()}
	mustSave(t, s, ok)
	equalRecords(t, mustLatest(t, s, "p_x", "UW-2"), ok)
}

func testLatestRunIsLastSaved(t *testing.T, s steps.RunStore) {
	for _, id := range []string{"run-1", "run-2", "run-3"} {
		mustSave(t, s, record("p_x", "UW-1", id))
	}
	if got := mustLatest(t, s, "p_x", "UW-1").RunID; got != "run-3" {
		t.Fatalf("latest RunID = %q, want run-3", got)
	}
}

func testRunsKeyed(t *testing.T, s steps.RunStore) {
	keys := [][2]string{{"p_a", "UW-1"}, {"p_a", "UW-2"}, {"p_b", "UW-1"}}
	for i, k := range keys {
		mustSave(t, s, record(k[0], k[1], fmt.Sprint("run-", i)))
	}
	for i, k := range keys {
		if got := mustLatest(t, s, k[0], k[1]).RunID; got != fmt.Sprint("run-", i) {
			t.Errorf("LatestRun(%s, %s).RunID = %q, want run-%d", k[0], k[1], got, i)
		}
	}
	if _, err := s.LatestRun(t.Context(), "p_b", "UW-2"); !errors.Is(err, steps.ErrNotFound) {
		t.Errorf("LatestRun(p_b, UW-2): err = %v, want ErrNotFound", err)
	}
}

// testAwkwardKeys checks that ids are data, not syntax: a store keyed by
// NATS subjects or paths must encode them.
func testAwkwardKeys(t *testing.T, s steps.RunStore) {
	subjects := []string{"uw.1", "uw.1.2", "uw/1", "uw 1", "uw*", "uw>", "ÜW-1", "uw=1", "_"}
	for i, subj := range subjects {
		mustSave(t, s, record("p_x", subj, fmt.Sprint("run-", i)))
		if err := s.SaveStepOutput(t.Context(), "run."+subj, steps.StepProcessing, []byte(fmt.Sprint(i))); err != nil {
			t.Fatalf("SaveStepOutput(run.%s): %v", subj, err)
		}
	}
	for i, subj := range subjects {
		if got := mustLatest(t, s, "p_x", subj).RunID; got != fmt.Sprint("run-", i) {
			t.Errorf("LatestRun(p_x, %q).RunID = %q, want run-%d", subj, got, i)
		}
		if got := string(mustOutput(t, s, "run."+subj, steps.StepProcessing)); got != fmt.Sprint(i) {
			t.Errorf("StepOutput(run.%s) = %q, want %d", subj, got, i)
		}
	}
}

func testRecordNotRetained(t *testing.T, s steps.RunStore) {
	rec := record("p_x", "UW-1", "run-1")
	mustSave(t, s, rec)
	rec.RunID = "changed"
	rec.Context.Metadata["tenant"] = "changed"
	got := mustLatest(t, s, "p_x", "UW-1")
	equalRecords(t, got, record("p_x", "UW-1", "run-1"))
	got.Context.Metadata["tenant"] = "changed again"
	equalRecords(t, mustLatest(t, s, "p_x", "UW-1"), record("p_x", "UW-1", "run-1"))
}

func testStepOutputMissing(t *testing.T, s steps.RunStore) {
	if _, err := s.StepOutput(t.Context(), "run-1", steps.StepProcessing); !errors.Is(err, steps.ErrNotFound) {
		t.Fatalf("StepOutput on an empty store: err = %v, want ErrNotFound", err)
	}
}

func testStepOutputRoundTrip(t *testing.T, s steps.RunStore) {
	want := []byte(`{"total":42,"names":["a","b"]}`)
	if err := s.SaveStepOutput(t.Context(), "run-1", steps.StepProcessing, want); err != nil {
		t.Fatal(err)
	}
	if got := mustOutput(t, s, "run-1", steps.StepProcessing); !bytes.Equal(got, want) {
		t.Fatalf("StepOutput = %q, want %q", got, want)
	}
}

func testStepOutputKeyed(t *testing.T, s steps.RunStore) {
	ctx := t.Context()
	if err := s.SaveStepOutput(ctx, "run-1", steps.StepProcessing, []byte(`1`)); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStepOutput(ctx, "run-2", steps.StepProcessing, []byte(`2`)); err != nil {
		t.Fatal(err)
	}
	if err := s.SaveStepOutput(ctx, "run-1", steps.StepValidation, []byte(`3`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		run  string
		step steps.Step
		want string
	}{{"run-1", steps.StepProcessing, "1"}, {"run-2", steps.StepProcessing, "2"}, {"run-1", steps.StepValidation, "3"}} {
		if got := string(mustOutput(t, s, c.run, c.step)); got != c.want {
			t.Errorf("StepOutput(%s, %s) = %q, want %q", c.run, c.step, got, c.want)
		}
	}
	if _, err := s.StepOutput(ctx, "run-2", steps.StepValidation); !errors.Is(err, steps.ErrNotFound) {
		t.Errorf("StepOutput(run-2, validation): err = %v, want ErrNotFound", err)
	}
}

func testStepOutputReplaced(t *testing.T, s steps.RunStore) {
	for _, v := range []string{`"first"`, `"second"`} {
		if err := s.SaveStepOutput(t.Context(), "run-1", steps.StepProcessing, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if got := string(mustOutput(t, s, "run-1", steps.StepProcessing)); got != `"second"` {
		t.Fatalf("StepOutput = %s, want \"second\"", got)
	}
}

func testStepOutputNotAliased(t *testing.T, s steps.RunStore) {
	data := []byte(`"original"`)
	if err := s.SaveStepOutput(t.Context(), "run-1", steps.StepProcessing, data); err != nil {
		t.Fatal(err)
	}
	copy(data, `"mutated!"`)
	got := mustOutput(t, s, "run-1", steps.StepProcessing)
	if string(got) != `"original"` {
		t.Fatalf("StepOutput after the caller changed its slice = %s, want \"original\"", got)
	}
	copy(got, `"mutated!"`)
	if got := string(mustOutput(t, s, "run-1", steps.StepProcessing)); got != `"original"` {
		t.Fatalf("StepOutput after the caller changed a returned slice = %s, want \"original\"", got)
	}
}

// testLargeStepOutput stores 256 KiB, a generous processing output that
// still fits a default NATS max_payload of 1 MiB.
func testLargeStepOutput(t *testing.T, s steps.RunStore) {
	want := bytes.Repeat([]byte("0123456789abcdef"), 16<<10)
	if err := s.SaveStepOutput(t.Context(), "run-1", steps.StepProcessing, want); err != nil {
		t.Fatal(err)
	}
	if got := mustOutput(t, s, "run-1", steps.StepProcessing); !bytes.Equal(got, want) {
		t.Fatalf("StepOutput returned %d bytes, want the %d saved", len(got), len(want))
	}
}

func testConcurrent(t *testing.T, s steps.RunStore) {
	const workers, rounds = 8, 10
	ctx := context.WithoutCancel(t.Context())
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*4)
	for w := range workers {
		wg.Go(func() {
			subject := fmt.Sprint("UW-", w)
			for i := range rounds {
				runID := fmt.Sprintf("run-%d-%d", w, i)
				if err := s.SaveRun(ctx, record("p_x", subject, runID)); err != nil {
					errs <- err
				}
				if rec, err := s.LatestRun(ctx, "p_x", subject); err != nil {
					errs <- err
				} else if rec.RunID != runID {
					errs <- fmt.Errorf("LatestRun(p_x, %s).RunID = %q right after saving %q", subject, rec.RunID, runID)
				}
				if err := s.SaveStepOutput(ctx, runID, steps.StepProcessing, []byte(runID)); err != nil {
					errs <- err
				}
				if data, err := s.StepOutput(ctx, runID, steps.StepProcessing); err != nil {
					errs <- err
				} else if string(data) != runID {
					errs <- fmt.Errorf("StepOutput(%s) = %q", runID, data)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
