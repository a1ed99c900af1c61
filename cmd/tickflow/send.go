package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/pipeline"
)

// SendCmd submits a batch.
type SendCmd struct {
	Functions      []string      `arg:"" optional:"" name:"function" sep:"none" help:"A function: TYPE, or TYPE=PAYLOAD with the payload as JSON, in the order they run."`
	Label          string        `short:"l" help:"The authorization label to submit under (overrides the file's)."`
	File           string        `short:"f" placeholder:"FILE" help:"Read the batch from a JSON or YAML file (- for stdin): label, functions [{type, payload, expect}], key, idempotency_key."`
	Key            string        `short:"k" help:"Run one at a time, in order, with the domain's other batches of this key."`
	IdempotencyKey string        `name:"idempotency-key" short:"i" placeholder:"KEY" help:"Make the send safe to repeat: the same submission with the same key answers the same batch."`
	Expect         []string      `placeholder:"INDEX=CONTENT" sep:"none" help:"The confirmation content function INDEX (from 0) waits for; repeatable."`
	RunAt          string        `name:"run-at" placeholder:"TIME" help:"Schedule the batch: an RFC 3339 time (2030-01-02T15:04:05Z) before which it does not run."`
	Delay          string        `placeholder:"DURATION" help:"Schedule the batch this long after the send (90s, 15m, 2h)."`
	Quiet          bool          `short:"q" help:"Print only the batch's id, for scripts: id=$$(tickflow send -q ...)."`
	Wait           bool          `help:"Then wait until the batch finished, as wait does (and exit as it does)."`
	For            time.Duration `placeholder:"DURATION" help:"With --wait: how long to wait (default: until it finished)."`
}

// Run sends the batch.
func (c *SendCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	req := &api.SendRequest{}
	if c.File != "" {
		var err error
		if req, err = readBatchFile(c.File, env.Stdin); err != nil {
			return err
		}
	}
	if len(c.Functions) > 0 {
		if len(req.Functions) > 0 {
			return usage("functions given both in %s and as arguments; give them in one place", c.File)
		}
		calls, err := parseFunctions(c.Functions)
		if err != nil {
			return err
		}
		req.Functions = calls
	}
	for _, f := range []struct {
		dst *string
		v   string
	}{{&req.Label, c.Label}, {&req.Key, c.Key}, {&req.IdempotencyKey, c.IdempotencyKey}, {&req.RunAt, c.RunAt}, {&req.Delay, c.Delay}} {
		if f.v != "" {
			*f.dst = f.v
		}
	}
	if err := applyExpects(req.Functions, c.Expect); err != nil {
		return err
	}
	if req.Label == "" {
		return usage("no label: give --label, or a label in the file")
	}
	if len(req.Functions) == 0 {
		return usage("no functions: give them as arguments (TYPE or TYPE=PAYLOAD), or in a file (--file)")
	}
	switch {
	case c.For != 0 && !c.Wait:
		return usage("--for says how long --wait waits: give --wait too")
	case c.Quiet && (g.JSON || c.Wait):
		return usage("--quiet prints the id alone: not with --json or --wait")
	}
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Send(ctx, *req)
		if err != nil {
			return err
		}
		if c.Quiet {
			_, err := fmt.Fprintln(env.Stdout, rep.ID)
			return err
		}
		if !c.Wait || !g.JSON {
			if err := output(g, env, rep, func(w io.Writer) error {
				t := newTable(w, "ID", "DOMAIN", "PRIORITY", "RUN AT", "DUPLICATE")
				dup := "no"
				if rep.Duplicate {
					dup = "yes: sent before with this idempotency key; nothing queued again"
				}
				runAt := "now"
				if !rep.RunAt.IsZero() {
					runAt = stamp(rep.RunAt)
				}
				t.row(rep.ID, rep.Domain, rep.Priority, runAt, dup)
				return t.flush()
			}); err != nil {
				return err
			}
		}
		if !c.Wait {
			return nil
		}
		return wait(ctx, cl, g, env, rep.ID, c.For)
	})
}

// BatchCmd shows one batch.
type BatchCmd struct {
	ID uint64 `arg:"" help:"The batch's id."`
}

// Run shows the batch.
func (c *BatchCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	call := func(ctx context.Context, cl *client.Client) (*api.BatchReply, error) {
		return cl.Batch(ctx, api.IDRequest{ID: c.ID})
	}
	return show(ctx, g, env, call, func(w io.Writer, rep *api.BatchReply) error { return printBatch(w, rep, time.Now()) })
}

// WaitCmd waits for one of the user's batches to finish.
type WaitCmd struct {
	ID  uint64        `arg:"" help:"The batch's id: one you submitted."`
	For time.Duration `placeholder:"DURATION" help:"How long to wait; exit 8 if it has not finished by then (default: until it finished)."`
}

// Run waits.
func (c *WaitCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		return wait(ctx, cl, g, env, c.ID, c.For)
	})
}

// wait waits for batch id with client.Wait, at most d when d > 0, prints
// the batch and fails with errBatchFailed when it did not execute.
func wait(ctx context.Context, cl *client.Client, g *Globals, env *Env, id uint64, d time.Duration) error {
	if d < 0 {
		return usage("--for %v: expected a positive duration", d)
	}
	wctx := ctx
	if d > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	rep, err := cl.Wait(wctx, id)
	if err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) && wctx.Err() != nil {
			return fmt.Errorf("%w: batch %d has not finished after %v", errWaitTimeout, id, d)
		}
		return err
	}
	if err := output(g, env, rep, func(w io.Writer) error { return printBatch(w, rep, time.Now()) }); err != nil {
		return err
	}
	if rep.Record.Status != pipeline.Executed {
		return fmt.Errorf("%w: batch %d finished %s", errBatchFailed, id, outcomeText(rep))
	}
	return nil
}

// outcomeText is a batch's outcome as callbacks name it, or its status
// while it runs.
func outcomeText(rep *api.BatchReply) string {
	if rep.Record.Outcome != nil {
		return rep.Record.Outcome.String()
	}
	return string(rep.Record.Status)
}

// printBatch writes a batch's record, progress, functions, outputs and
// history for a person.
func printBatch(w io.Writer, rep *api.BatchReply, now time.Time) error {
	r := rep.Record
	b := r.Batch
	t := newTable(w)
	t.row("ID", b.ID)
	t.row("LABEL", b.Label)
	t.row("DOMAIN", b.Domain)
	t.row("PRIORITY", b.Priority)
	t.row("MODE", b.Subroutine.Mode)
	t.row("SUBMITTER", b.Submitter)
	t.row("KEY", orDash(b.Key))
	t.row("STATUS", r.Status)
	t.row("OUTCOME", outcomeText(rep))
	t.row("EXECUTIONS", r.Attempts)
	t.row("CREATED", fmt.Sprintf("%s (%s ago)", stamp(r.CreatedAt), ago(r.CreatedAt, now)))
	if !r.FinishedAt.IsZero() {
		t.row("FINISHED", fmt.Sprintf("%s (%s ago)", stamp(r.FinishedAt), ago(r.FinishedAt, now)))
	}
	if !b.ExpiresAt.IsZero() {
		t.row("EXPIRES", stamp(b.ExpiresAt))
	}
	if r.IdempotencyKey != "" {
		t.row("IDEMPOTENCY KEY", r.IdempotencyKey)
	}
	if r.DeadLetter != 0 {
		t.row("DEAD LETTER", r.DeadLetter)
	}
	if b.ReplayOf != 0 {
		t.row("REPLAY OF", b.ReplayOf)
	}
	if r.ReplayedAs != 0 {
		t.row("REPLAYED AS", r.ReplayedAs)
	}
	if p := rep.Progress; p != nil && !r.Status.Terminal() {
		t.row("PROGRESS", fmt.Sprintf("%s, next function %d of %d, moved by %s %s ago", p.State, p.Next, len(b.Functions), orDash(p.By), ago(p.UpdatedAt, now)))
		if p.LastError != "" {
			t.row("LAST ERROR", p.LastError)
		}
		if p.Waiting != nil {
			t.row("WAITING", fmt.Sprintf("%s (since %s ago)", p.Waiting.Reason, ago(p.Waiting.Since, now)))
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	out := map[int]pipeline.Output{}
	for _, o := range rep.Outputs {
		out[o.Index] = o
	}
	fmt.Fprintln(w)
	t = newTable(w, "FUNCTION", "TYPE", "PAYLOAD", "OUTPUT")
	for i, f := range b.Functions {
		o, ok := out[i]
		output := "-"
		switch {
		case ok && o.Ref != "":
			output = "ref " + o.Ref
		case ok:
			output = payloadText(o.Data)
		}
		t.row(i, f.Type, payloadText(f.Payload), output)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(r.History) > 0 {
		fmt.Fprintln(w)
		t = newTable(w, "AT", "WHAT", "DETAIL")
		for _, e := range r.History {
			t.row(stamp(e.At), e.What, orDash(e.Detail))
		}
		return t.flush()
	}
	return nil
}
