package streams

import (
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
