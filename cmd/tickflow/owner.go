package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/pipeline"
)

// DomainsCmd lists every domain.
type DomainsCmd struct{}

// Run lists the domains.
func (c *DomainsCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Domains(ctx)
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			t := newTable(w, "DOMAIN", "PAUSED", "BY", "HIGH", "MED", "DEAD LETTERS", "THROTTLE")
			for _, d := range rep.Domains {
				paused, throttle := "no", "-"
				if d.Paused {
					paused = "yes"
				}
				if th := d.Throttle; th != nil {
					throttle = fmt.Sprintf("%d/s", th.Limit)
				}
				t.row(d.Domain, paused, orDash(d.PausedBy), d.Depth[pipeline.High], d.Depth[pipeline.Med], d.DeadLetters, throttle)
			}
			return t.flush()
		})
	})
}

// QueueCmd lists a domain's queue.
type QueueCmd struct {
	Domain   string `arg:"" help:"The domain."`
	Priority string `arg:"" optional:"" help:"high or med (default: both, high first)."`
	From     int    `help:"The first position listed (from 0); needs a priority."`
	To       int    `help:"The position after the last one listed (default: the end); needs a priority."`
}

// Run lists the queue.
func (c *QueueCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	prios := []pipeline.Priority{pipeline.High, pipeline.Med}
	if c.Priority != "" {
		p := pipeline.Priority(c.Priority)
		if err := p.Validate(); err != nil {
			return usage("priority %q: expected high or med", c.Priority)
		}
		prios = []pipeline.Priority{p}
	} else if c.From != 0 || c.To != 0 {
		return usage("--from and --to are positions in one queue: name its priority (high or med)")
	}
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		var reps []*api.QueueReply
		for _, p := range prios {
			rep, err := cl.Queue(ctx, api.QueueRequest{Domain: c.Domain, Priority: p, From: c.From, To: c.To})
			if err != nil {
				return err
			}
			reps = append(reps, rep)
		}
		var v any = reps
		if len(reps) == 1 {
			v = reps[0]
		}
		return output(g, env, v, func(w io.Writer) error {
			t := newTable(w, "PRIORITY", "POSITION", "ID", "SEQ", "STATE", "KEY")
			for _, rep := range reps {
				for _, it := range rep.Items {
					t.row(rep.Priority, it.Position, it.ID, it.Seq, it.State, orDash(it.Key))
				}
			}
			if err := t.flush(); err != nil {
				return err
			}
			for _, rep := range reps {
				fmt.Fprintf(w, "%s: %d batches\n", rep.Priority, rep.Length)
			}
			return nil
		})
	})
}

// InflightCmd lists a domain's unfinished batches.
type InflightCmd struct {
	Domain string `arg:"" help:"The domain."`
	Limit  int    `short:"n" help:"At most this many (1 to 1000; default 100)."`
	Total  bool   `help:"Count them all (reads both queues to their end)."`
}

// Run lists the batches in flight.
func (c *InflightCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.InFlight(ctx, api.InFlightRequest{Domain: c.Domain, Limit: c.Limit, Total: c.Total})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			now := time.Now()
			t := newTable(w, "ID", "LABEL", "SUBMITTER", "PRIORITY", "POSITION", "STATE", "NEXT", "ROTATIONS", "ATTEMPTS", "HOLDER", "SINCE", "AGE", "WHY")
			for _, it := range rep.Items {
				why := it.LastError
				if it.Waiting != nil {
					why = it.Waiting.Reason
				}
				t.row(it.ID, it.Label, it.Submitter, it.Priority, it.Position, it.State, fmt.Sprintf("%d/%d", it.Next, it.Functions),
					it.Rotations, it.Attempts, orDash(it.Holder), ago(it.Since, now), short(time.Duration(it.AgeMS)*time.Millisecond), orDash(why))
			}
			if err := t.flush(); err != nil {
				return err
			}
			switch {
			case rep.Total != nil:
				fmt.Fprintf(w, "%d unfinished\n", *rep.Total)
			case rep.More:
				fmt.Fprintln(w, "more unfinished beyond these (--limit, or --total to count them)")
			}
			return nil
		})
	})
}

// KeysCmd lists a domain's keys.
type KeysCmd struct {
	Domain string `arg:"" help:"The domain."`
	Key    string `help:"Only this key, with the batches of its order."`
	After  string `help:"Only the keys after this one (the next page)."`
	Limit  int    `short:"n" help:"At most this many keys (1 to 1000; default 100)."`
}

// Run lists the keys.
func (c *KeysCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Keys(ctx, api.KeysRequest{Domain: c.Domain, Key: c.Key, After: c.After, Limit: c.Limit})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			t := newTable(w, "KEY", "HEAD", "PRIORITY", "STATE", "QUEUE", "PROGRESS", "ATTEMPTS", "FOR", "WAITING", "SENDER", "SUBMITTER")
			for _, k := range rep.Keys {
				t.row(k.Key, k.Head, k.Priority, k.State, k.Queue, orDash(k.Progress), k.Attempts,
					short(time.Duration(k.For*float64(time.Second))), k.Waiting, orDash(k.Sender), k.Submitter)
			}
			if err := t.flush(); err != nil {
				return err
			}
			for _, k := range rep.Keys {
				if len(k.Batches) == 0 {
					continue
				}
				fmt.Fprintf(w, "\n%s, in order:\n", k.Key)
				t := newTable(w, "ID", "SUBMITTER")
				for _, b := range k.Batches {
					t.row(b.ID, b.Submitter)
				}
				if err := t.flush(); err != nil {
					return err
				}
			}
			if rep.More && len(rep.Keys) > 0 {
				fmt.Fprintf(w, "\nmore: tickflow keys %s --after %s\n", rep.Domain, rep.Keys[len(rep.Keys)-1].Key)
			}
			return nil
		})
	})
}

// SendersCmd lists a domain's senders.
type SendersCmd struct {
	Domain string `arg:"" help:"The domain."`
}

// Run lists the senders.
func (c *SendersCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	call := func(ctx context.Context, cl *client.Client) (*api.SendersReply, error) {
		return cl.Senders(ctx, api.SendersRequest{Domain: c.Domain})
	}
	return show(ctx, g, env, call, func(w io.Writer, rep *api.SendersReply) error {
		t := newTable(w, "NAME", "STATE", "KEY", "BATCH", "SUBMITTER", "PROCESSOR", "FOR")
		for _, s := range rep.Senders {
			t.row(s.Name, s.State, orDash(s.Key), orDash(s.Batch), orDash(s.Submitter), orDash(s.Processor), short(s.For.D()))
		}
		return t.flush()
	})
}

// PauseCmd pauses a domain.
type PauseCmd struct {
	Domain string `arg:"" help:"The domain."`
}

// Run pauses.
func (c *PauseCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return setPaused(ctx, g, env, c.Domain, (*client.Client).Pause)
}

// ResumeCmd resumes a domain.
type ResumeCmd struct {
	Domain string `arg:"" help:"The domain."`
}

// Run resumes.
func (c *ResumeCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return setPaused(ctx, g, env, c.Domain, (*client.Client).Resume)
}

func setPaused(ctx context.Context, g *Globals, env *Env, domain string,
	op func(*client.Client, context.Context, api.DomainRequest) (*api.StateReply, error)) error {
	call := func(ctx context.Context, cl *client.Client) (*api.StateReply, error) {
		return op(cl, ctx, api.DomainRequest{Domain: domain})
	}
	return show(ctx, g, env, call, func(w io.Writer, rep *api.StateReply) error {
		t := newTable(w, "DOMAIN", "PAUSED")
		t.row(rep.Domain, yesNo(rep.Paused))
		return t.flush()
	})
}

// ReloadCmd reloads the authorization table.
type ReloadCmd struct{}

// Run reloads.
func (c *ReloadCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Reload(ctx)
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			fmt.Fprintf(w, "%d labels\n", rep.Labels)
			for _, warn := range rep.Warnings {
				fmt.Fprintf(w, "warning: %s\n", warn)
			}
			return nil
		})
	})
}
