package streams_test

import (
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
)

// TestScheduleIdempotencyKey: a period's key reads back as its schedule
// and period, and no other key reads as one.
func TestScheduleIdempotencyKey(t *testing.T) {
	p := time.Unix(1_800_000_000, 0).UTC()
	key := streams.ScheduleIdempotencyKey("nightly-report", p)
	if key != "schedule:nightly-report:1800000000" {
		t.Fatalf("key %q", key)
	}
	name, got, ok := streams.ParseScheduleIdempotencyKey(key)
	if !ok || name != "nightly-report" || !got.Equal(p) {
		t.Fatalf("read back %q %v %v", name, got, ok)
	}
	for _, k := range []string{"", "order-7", "schedule:", "schedule::1", "schedule:x", "schedule:x:soon", "schedules:x:1"} {
		if _, _, ok := streams.ParseScheduleIdempotencyKey(k); ok {
			t.Errorf("%q read as a schedule's key", k)
		}
	}
}
