package client

import (
	"context"

	"github.com/tickflow/tickflow/api"
)

// Schedules lists the authorization table's schedules by name: each one's
// timing, the batch it sends, the start of the last period fired and its
// batch, the start of the next period, and whether it is paused. Owner
// only (ErrForbidden).
func (c *Client) Schedules(ctx context.Context) (*api.SchedulesReply, error) {
	return call[api.SchedulesReply](ctx, c, api.OpSchedules, struct{}{})
}

// PauseSchedule stops a schedule from firing, for every authz replica,
// until it is resumed; a period being sent as the pause arrives may still
// be. Safe to retry. Owner only (ErrForbidden); ErrNotFound for a name the
// table does not have.
func (c *Client) PauseSchedule(ctx context.Context, req api.ScheduleRequest) (*api.ScheduleInfo, error) {
	if req.Name == "" {
		return nil, invalid(api.OpPauseSchedule, "name is empty; expected a schedule of the table")
	}
	return call[api.ScheduleInfo](ctx, c, api.OpPauseSchedule, req)
}

// ResumeSchedule lets a paused schedule fire again: the latest period that
// started while it was paused fires at once, and the older ones it missed
// are skipped. Safe to retry. Owner only (ErrForbidden); ErrNotFound for a
// name the table does not have.
func (c *Client) ResumeSchedule(ctx context.Context, req api.ScheduleRequest) (*api.ScheduleInfo, error) {
	if req.Name == "" {
		return nil, invalid(api.OpResumeSchedule, "name is empty; expected a schedule of the table")
	}
	return call[api.ScheduleInfo](ctx, c, api.OpResumeSchedule, req)
}
