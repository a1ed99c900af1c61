package authz_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tickflow/tickflow/authz"
)

func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestCallbackTimeOfFirstStepBatch: a batch finished in its first step (no
// progress record written) still gets the time of its callback in its
// history.
func TestCallbackTimeOfFirstStepBatch(t *testing.T) {
	b := setup(t)
	before := time.Now()
	id := b.send(t, "alice", "jobs", noop())
	rec := b.settled(t, id)
	after := time.Now()
	var found bool
	for _, e := range rec.History {
		if e.What != "callback" {
			continue
		}
		found = true
		if e.At.Before(before.Add(-time.Second)) || e.At.After(after.Add(time.Second)) {
			t.Fatalf("callback event at %s, want between %s and %s", e.At, before, after)
		}
	}
	if !found {
		t.Fatalf("no callback event in %+v", rec.History)
	}
}

// TestRunLogs: authz says when it stops, and leaves "batch finished" at
// info to the processor.
func TestRunLogs(t *testing.T) {
	b := setup(t)
	sink := b.startAuthzWith(t, authz.Options{})
	id := b.send(t, "alice", "jobs", noop())
	b.settled(t, id)
	b.stop()
	var finished, stopped int
	for _, r := range sink.records(t) {
		switch r["msg"] {
		case "batch finished":
			finished++
			if r["level"] != "DEBUG" {
				t.Fatalf("authz logs batch finished at %v, want DEBUG", r["level"])
			}
		case "authz stopped":
			stopped++
			if r["level"] != "INFO" {
				t.Fatalf("authz stopped logged at %v, want INFO", r["level"])
			}
		}
	}
	if finished != 1 || stopped != 1 {
		t.Fatalf("batch finished %d times, authz stopped %d times; want 1 and 1", finished, stopped)
	}
}
