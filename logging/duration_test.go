package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"
)

// TestJSONDurations: durations read as text in JSON, as in tint, not as
// nanoseconds, in groups too.
func TestJSONDurations(t *testing.T) {
	t.Parallel()
	for _, format := range []string{FormatJSON, FormatAuto} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := New(&buf, format, "info")
			if err != nil {
				t.Fatal(err)
			}
			log.Info("ticking", "every", 200*time.Millisecond, slog.Group("retry", "delay", 90*time.Second), "count", 3)
			var rec struct {
				Every string `json:"every"`
				Retry struct {
					Delay string `json:"delay"`
				} `json:"retry"`
				Count int `json:"count"`
			}
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("%v: %s", err, buf.Bytes())
			}
			if rec.Every != "200ms" || rec.Retry.Delay != "1m30s" || rec.Count != 3 {
				t.Fatalf("got %+v from %s", rec, buf.Bytes())
			}
		})
	}
}
