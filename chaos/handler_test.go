package chaos

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// TestRecorder: every run that reaches its effect or its failure is on
// disk; a call whose deadline passes first leaves nothing.
func TestRecorder(t *testing.T) {
	dir := t.TempDir()
	r, err := OpenRecorder(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Error(err)
		}
	})
	call := func(ctx context.Context, s Step, attempt int) error {
		_, err := r.Handle(ctx, &pipeline.Call{BatchID: 7, Index: 1, Attempt: attempt, Payload: pipeline.MustPayload(s)})
		return err
	}
	if err := call(context.Background(), Step{}, 1); err != nil {
		t.Fatal(err)
	}
	if err := call(context.Background(), Step{FailAttempts: 1}, 1); err == nil || pipeline.IsPermanent(err) {
		t.Fatalf("a failing first attempt returned %v, want a retryable error", err)
	}
	if err := call(context.Background(), Step{Fail: true}, 3); !pipeline.IsPermanent(err) {
		t.Fatalf("a failing step returned %v, want a permanent error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := call(ctx, Step{SleepMS: 5000}, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call past its deadline returned %v", err)
	}
	// A line cut short by a kill is no execution.
	f, err := os.OpenFile(filepath.Join(dir, "1"+execLogExt), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("1\t2\t3"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	execs, torn, err := ReadExecutions(dir)
	if err != nil {
		t.Fatal(err)
	}
	if torn != 1 || len(execs) != 3 {
		t.Fatalf("read %d executions and %d torn lines, want 3 and 1: %+v", len(execs), torn, execs)
	}
	want := []bool{true, false, false}
	for i, e := range execs {
		if e.BatchID != 7 || e.Index != 1 || e.PID != os.Getpid() || e.OK != want[i] {
			t.Fatalf("execution %d is %+v", i, e)
		}
	}
}
