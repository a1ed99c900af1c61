package streams

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// BucketSchedules holds the state of each periodic schedule of the
// authorization table, key ScheduleKey(name): the last period fired and
// the pause state, shared by every authz replica.
const BucketSchedules = "schedules"

// ScheduleKey is the schedules-bucket key of schedule name (a name the
// table validated: letters, digits, '-' and '_').
func ScheduleKey(name string) string { return name }

// ScheduleIdempotencyPrefix starts every idempotency key authz sends a
// schedule's batch with; a caller's own send may not use it, so no caller
// can take a period's key before its schedule does.
const ScheduleIdempotencyPrefix = "schedule:"

// ScheduleIdempotencyKey is the idempotency key of schedule name's batch
// for the period starting at period: however many replicas send it, and
// however often one sends it again after a restart, the period has one
// batch.
func ScheduleIdempotencyKey(name string, period time.Time) string {
	return ScheduleIdempotencyPrefix + name + ":" + strconv.FormatInt(period.Unix(), 10)
}

// ParseScheduleIdempotencyKey reads a ScheduleIdempotencyKey back into its
// schedule's name and period; ok is false for any other key.
func ParseScheduleIdempotencyKey(key string) (name string, period time.Time, ok bool) {
	rest, found := strings.CutPrefix(key, ScheduleIdempotencyPrefix)
	if !found {
		return "", time.Time{}, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", time.Time{}, false
	}
	sec, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return "", time.Time{}, false
	}
	return rest[:i], time.Unix(sec, 0).UTC(), true
}

// ScheduleState is the value of a schedule's key in BucketSchedules. It is
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
