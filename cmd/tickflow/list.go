package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/pipeline"
)

// statuses are the statuses list filters by.
var statuses = []pipeline.Status{pipeline.InProcess, pipeline.Executed, pipeline.Rejected,
	pipeline.PartiallyExecuted, pipeline.RemovedByOwner, pipeline.Expired}

// ListCmd lists the user's batches.
type ListCmd struct {
	Status    string `placeholder:"STATUS" help:"Only batches of this status: InProcess, Executed, Rejected, PartiallyExecuted, RemovedByOwner or Expired."`
	Limit     int    `short:"n" help:"At most this many (1 to 500; default 50)."`
	Before    uint64 `placeholder:"CURSOR" help:"The page after the one that printed this cursor (its next)."`
	Submitter string `placeholder:"USER" help:"Another user's batches (the owner only)."`
}

// Run lists.
func (c *ListCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	if c.Status != "" && !slices.Contains(statuses, pipeline.Status(c.Status)) {
		return usage("--status %q: expected one of %v", c.Status, statuses)
	}
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.List(ctx, api.ListRequest{Status: pipeline.Status(c.Status), Limit: c.Limit, Before: c.Before, Submitter: c.Submitter})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			now := time.Now()
			t := newTable(w, "ID", "LABEL", "DOMAIN", "PRIORITY", "STATUS", "OUTCOME", "EXECUTIONS", "FUNCTIONS", "CREATED", "LINKS")
			for _, it := range rep.Items {
				t.row(it.ID, it.Label, it.Domain, it.Priority, it.Status, orDash(it.Outcome), it.Attempts, it.Functions, ago(it.CreatedAt, now)+" ago", links(it))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if rep.Next != 0 {
				fmt.Fprintf(w, "\nmore: tickflow list --before %d\n", rep.Next)
			}
			return nil
		})
	})
}

// links says how a listed batch relates to dead letters and replays.
func links(it api.BatchSummary) string {
	var l []string
	if it.DeadLetter != 0 {
		l = append(l, fmt.Sprintf("dead letter %d", it.DeadLetter))
	}
	if it.ReplayOf != 0 {
		l = append(l, fmt.Sprintf("replay of %d", it.ReplayOf))
	}
	if it.ReplayedAs != 0 {
		l = append(l, fmt.Sprintf("replayed as %d", it.ReplayedAs))
	}
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, ", ")
}

// CancelCmd cancels one of the user's batches.
type CancelCmd struct {
	ID uint64 `arg:"" help:"The batch's id."`
}

// Run cancels.
func (c *CancelCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Cancel(ctx, api.IDRequest{ID: c.ID})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			t := newTable(w, "ID", "STATUS")
			t.row(rep.ID, rep.Status)
			return t.flush()
		})
	})
}

// ConfirmCmd confirms a function waiting for a confirmation.
type ConfirmCmd struct {
	ID      uint64 `arg:"" help:"The batch's id."`
	Index   int    `arg:"" help:"The function's index (from 0)."`
	Content string `arg:"" help:"The confirmation: the content the function expects, or for an inclusion: included, or failed[: reason]."`
	Ref     string `help:"For an inclusion: the dispatch the confirmation is about (its ref)."`
}

// Run confirms.
func (c *ConfirmCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Confirm(ctx, api.ConfirmRequest{ID: c.ID, Index: c.Index, Content: c.Content, Ref: c.Ref})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			t := newTable(w, "ID", "FUNCTION", "CONFIRMED")
			t.row(rep.ID, rep.Index, "yes")
			return t.flush()
		})
	})
}
