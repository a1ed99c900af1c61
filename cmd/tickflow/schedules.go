package main

import (
	"context"
	"io"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
)

// SchedulesCmd lists the table's periodic schedules, or pauses or resumes
// one of them.
type SchedulesCmd struct {
	List   ScheduleListCmd   `cmd:"" default:"1" help:"List the schedules: timing, batch, last period fired, next, pause state (the default)."`
	Pause  SchedulePauseCmd  `cmd:"" help:"Stop a schedule firing, for every authz replica, until it is resumed."`
	Resume ScheduleResumeCmd `cmd:"" help:"Let a paused schedule fire again; the latest period it missed fires at once."`
}

// ScheduleListCmd lists the schedules.
type ScheduleListCmd struct{}

// Run lists the schedules.
func (c *ScheduleListCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return show(ctx, g, env, func(ctx context.Context, cl *client.Client) (*api.SchedulesReply, error) { return cl.Schedules(ctx) },
		func(w io.Writer, rep *api.SchedulesReply) error {
			t := newTable(w, "NAME", "CRON", "USER", "LABEL", "PAUSED", "LAST FIRED", "LAST BATCH", "NEXT")
			for _, s := range rep.Schedules {
				t.row(s.Name, s.Cron, s.User, s.Label, yesNo(s.Paused), stampOrDash(s.LastFired), orDash(s.LastBatch), stampOrDash(s.NextFire))
			}
			return t.flush()
		})
}

// SchedulePauseCmd pauses a schedule.
type SchedulePauseCmd struct {
	Name string `arg:"" help:"The schedule, as the table names it."`
}

// Run pauses the schedule.
func (c *SchedulePauseCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return setSchedulePaused(ctx, g, env, c.Name, (*client.Client).PauseSchedule)
}

// ScheduleResumeCmd resumes a schedule.
type ScheduleResumeCmd struct {
	Name string `arg:"" help:"The schedule, as the table names it."`
}

// Run resumes the schedule.
func (c *ScheduleResumeCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return setSchedulePaused(ctx, g, env, c.Name, (*client.Client).ResumeSchedule)
}

func setSchedulePaused(ctx context.Context, g *Globals, env *Env, name string,
	op func(*client.Client, context.Context, api.ScheduleRequest) (*api.ScheduleInfo, error)) error {
	call := func(ctx context.Context, cl *client.Client) (*api.ScheduleInfo, error) {
		return op(cl, ctx, api.ScheduleRequest{Name: name})
	}
	return show(ctx, g, env, call, func(w io.Writer, s *api.ScheduleInfo) error {
		t := newTable(w, "NAME", "PAUSED", "BY", "NEXT")
		t.row(s.Name, yesNo(s.Paused), orDash(s.By), stampOrDash(s.NextFire))
		return t.flush()
	})
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// stampOrDash is stamp for a time that may be absent.
func stampOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return stamp(*t)
}
