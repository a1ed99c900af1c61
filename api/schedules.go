package api

import (
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// ScheduleRequest names a schedule of the table.
type ScheduleRequest struct {
	Name string `json:"name"`
}

// ScheduleInfo is a schedule of the table in force and its state.
type ScheduleInfo struct {
	Name     string            `json:"name"`
	Cron     string            `json:"cron"`
	TimeZone string            `json:"time_zone,omitempty"`
	User     string            `json:"user"`
	Label    string            `json:"label"`
	Priority pipeline.Priority `json:"priority"`
	Key      string            `json:"key,omitempty"`
	// Paused says the schedule fires nothing until it is resumed; By and
	// At say who paused or resumed it last, and when.
	Paused bool      `json:"paused"`
	By     string    `json:"by,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// LastFired is the start of the last period fired, and LastBatch its
	// batch; absent when none was.
	LastFired *time.Time `json:"last_fired,omitempty"`
	LastBatch uint64     `json:"last_batch,omitempty"`
	// NextFire is the start of the next period; absent while paused.
	NextFire *time.Time `json:"next_fire,omitempty"`
}

// SchedulesReply lists the table's schedules by name.
type SchedulesReply struct {
	Schedules []ScheduleInfo `json:"schedules"`
}
