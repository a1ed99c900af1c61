package records_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
)

// TestScheduleStateRoundTrip: a schedule's state reads back as written,
// and a value that is not one is ErrDecode.
func TestScheduleStateRoundTrip(t *testing.T) {
	st := records.ScheduleState{Spec: "@every 1s", Since: time.Unix(1_800_000_000, 0).UTC(),
		Last: time.Unix(1_800_000_005, 0).UTC(), Batch: 42, Paused: true, By: "owner", At: time.Unix(1_800_000_006, 0).UTC()}
	got, err := records.DecodeScheduleState(st.Encode())
	if err != nil || got != st {
		t.Fatalf("read back %+v, %v; want %+v", got, err, st)
	}
	if _, err := records.DecodeScheduleState([]byte("paused")); !errors.Is(err, records.ErrDecode) {
		t.Fatalf("garbage: %v, want ErrDecode", err)
	}
}
