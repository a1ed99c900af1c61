package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/pipeline"
	"golang.org/x/term"
)

// DLQCmd lists dead letters.
type DLQCmd struct {
	Domain string `short:"d" help:"Only this domain's."`
	From   uint64 `placeholder:"SEQ" help:"From this sequence on."`
	Limit  int    `short:"n" help:"At most this many (1 to 1000; default 100)."`
}

// Run lists the dead letters.
func (c *DLQCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.DLQ(ctx, api.DLQRequest{Domain: c.Domain, From: c.From, Limit: c.Limit})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			now := time.Now()
			t := newTable(w, "SEQ", "BATCH", "DOMAIN", "OUTCOME", "FUNCTION", "EXECUTIONS", "AGE", "REPLAYED AS", "ERROR")
			for _, it := range rep.Items {
				fn := any(it.Index)
				if it.Index < 0 {
					fn = "unit" // an atomic batch fails as one
				}
				t.row(it.Seq, it.BatchID, it.Domain, it.Outcome, fn, it.Attempts, ago(it.At, now), orDash(it.ReplayedAs), orDash(it.Error))
			}
			return t.flush()
		})
	})
}

// ReplayCmd replays dead letters.
type ReplayCmd struct {
	Seq    uint64 `arg:"" optional:"" help:"The dead letter's sequence (from dlq)."`
	All    bool   `help:"Every dead letter not replayed yet (of --domain, or of every domain)."`
	Domain string `short:"d" help:"With --all: only this domain's."`
}

// Run replays.
func (c *ReplayCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	switch {
	case c.Seq == 0 && !c.All:
		return usage("name a dead letter's sequence, or --all")
	case c.Seq != 0 && (c.All || c.Domain != ""):
		return usage("a sequence names one dead letter: give it alone, or --all (with --domain or not)")
	}
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Replay(ctx, api.ReplayRequest{Seq: c.Seq, All: c.All, Domain: c.Domain})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			t := newTable(w, "SEQ", "BATCH", "REPLAYED AS")
			for _, r := range rep.Replayed {
				t.row(r.Seq, r.From, r.AsNew)
			}
			if err := t.flush(); err != nil {
				return err
			}
			if len(rep.Replayed) == 0 {
				fmt.Fprintln(w, "nothing to replay")
			}
			return nil
		})
	})
}

// PurgeCmd removes dead letters for good.
type PurgeCmd struct {
	Seq       uint64        `arg:"" optional:"" help:"The dead letter's sequence (from dlq)."`
	All       bool          `help:"Every dead letter (of --domain, or of every domain)."`
	OlderThan time.Duration `placeholder:"DURATION" help:"Those dead-lettered longer ago than this, e.g. 720h (of --domain, or of every domain)."`
	Domain    string        `short:"d" help:"With --all or --older-than: only this domain's."`
	Force     bool          `short:"f" help:"Do not ask for a confirmation (needed when stdin is not a terminal)."`
}

// Run purges, once confirmed.
func (c *PurgeCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	named := 0
	for _, set := range []bool{c.Seq != 0, c.All, c.OlderThan != 0} {
		if set {
			named++
		}
	}
	var what string
	switch {
	case named != 1:
		return usage("name the dead letters to purge, one of: a sequence, --all or --older-than (the last two with --domain or not)")
	case c.Seq != 0 && c.Domain != "":
		return usage("a sequence names one dead letter, whatever its domain: give it without --domain")
	case c.OlderThan < 0:
		return usage("--older-than %v: expected a positive duration such as 720h", c.OlderThan)
	case c.Seq != 0:
		what = fmt.Sprintf("dead letter %d", c.Seq)
	case c.All:
		what = "every dead letter"
	default:
		what = fmt.Sprintf("every dead letter older than %v", c.OlderThan)
	}
	if c.Seq == 0 {
		if c.Domain != "" {
			what += " of domain " + c.Domain
		} else {
			what += " of every domain"
		}
	}
	if !c.Force {
		if err := confirmed(env, what); err != nil {
			return err
		}
	}
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		rep, err := cl.Purge(ctx, api.PurgeRequest{Seq: c.Seq, All: c.All, OlderThan: pipeline.Duration(c.OlderThan), Domain: c.Domain})
		if err != nil {
			return err
		}
		return output(g, env, rep, func(w io.Writer) error {
			t := newTable(w, "PURGED")
			t.row(rep.Purged)
			return t.flush()
		})
	})
}

// confirmed asks on a terminal whether to purge what, and reads y or yes;
// without a terminal it refuses, asking for --force.
func confirmed(env *Env, what string) error {
	f, ok := env.Stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return usage("purging %s needs a confirmation, and stdin is not a terminal: give --force to purge without asking", what)
	}
	fmt.Fprintf(env.Stderr, "Remove %s for good? It cannot be replayed afterwards. [y/N] ", what)
	answer, _ := bufio.NewReader(f).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return usage("not confirmed: nothing purged")
	}
	return nil
}
