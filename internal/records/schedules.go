package records

import (
	"encoding/json"
	"fmt"
	"time"
)

// ScheduleState is the value of a schedule's key in streams.BucketSchedules. It is
// JSON, so `nats kv get schedules <name>` is legible.
type ScheduleState struct {
	// Spec is the schedule's timing (its cron spec and time zone) that
	// Since and Last refer to: a schedule whose timing changed starts
	// afresh from the change.
	Spec string `json:"spec"`
	// Since is when this timing was first seen, or, once the schedule
	// was resumed, just before the latest period that began while it was
	// paused: only periods after it fire.
	Since time.Time `json:"since"`
	// Last is the start of the last period fired; zero when none was.
	Last time.Time `json:"last,omitzero"`
	// Batch is the batch of period Last.
	Batch uint64 `json:"batch,omitempty"`
	// Paused stops the schedule from firing until resumed.
	Paused bool `json:"paused,omitempty"`
	// By and At say who paused or resumed the schedule last, and when.
	By string    `json:"by,omitempty"`
	At time.Time `json:"at,omitzero"`
}

// DecodeScheduleState reads a schedules bucket value.
func DecodeScheduleState(b []byte) (ScheduleState, error) {
	var st ScheduleState
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%w schedule state %q: %w", ErrDecode, b, err)
	}
	return st, nil
}

// Encode writes the state as the bucket holds it.
func (st *ScheduleState) Encode() []byte {
	b, _ := json.Marshal(st) // strings, numbers and times: it cannot fail
	return b
}
