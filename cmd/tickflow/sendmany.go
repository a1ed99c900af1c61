package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
)

// SendManyCmd submits the batches of a JSON Lines file, many a request.
type SendManyCmd struct {
	File       string `arg:"" placeholder:"FILE" help:"JSON Lines (- for stdin): one batch a line, with send's fields (label, functions [{type, payload, expect}], key, idempotency_key, run_at, delay); blank lines are skipped."`
	Label      string `short:"l" help:"The label of the lines that name none."`
	PerRequest int    `name:"per-request" default:"1000" placeholder:"N" help:"Batches a request, 1 to 1000."`
}

// manyLine is one batch of the file: its line number and request.
type manyLine struct {
	line int
	req  api.SendRequest
}

// manyResult is a batch's result as --json prints it: its line and what
// authz answered.
type manyResult struct {
	Line int `json:"line"`
	api.SendManyResult
}

// Run reads the whole file, checks every line, then sends the batches in
// requests of PerRequest. It stops after a request refused whole or one
// whose batch failed inside authz, and says which lines were not sent.
func (c *SendManyCmd) Run(ctx context.Context, g *Globals, env *Env) error {
	if c.PerRequest < 1 || c.PerRequest > api.MaxSendMany {
		return usage("--per-request %d: expected 1 to %d", c.PerRequest, api.MaxSendMany)
	}
	lines, err := c.read(env.Stdin)
	if err != nil {
		return err
	}
	if len(lines) == 0 {
		name := c.File
		if name == "-" {
			name = "stdin"
		}
		return usage("%s: no batches", name)
	}
	return withSession(ctx, g, env, func(ctx context.Context, cl *client.Client) error {
		var (
			out   []manyResult
			first error // the first batch refused, for the exit code
		)
		sent := 0
		var stop error
		for sent < len(lines) && stop == nil {
			chunk := lines[sent:min(sent+c.PerRequest, len(lines))]
			req := api.SendManyRequest{Batches: make([]api.SendRequest, len(chunk))}
			for i, l := range chunk {
				req.Batches[i] = l.req
			}
			rep, err := cl.SendMany(ctx, req)
			if err != nil {
				stop = err
				break
			}
			for i, r := range rep.Results {
				out = append(out, manyResult{Line: chunk[i].line, SendManyResult: r})
				if err := client.ResultError(&r); err != nil {
					if first == nil {
						first = &lineError{line: chunk[i].line, err: err}
					}
					if r.Code >= api.CodeInternal {
						stop = first
					}
				}
			}
			sent += len(chunk)
		}
		if err := c.print(g, env, out); err != nil {
			return err
		}
		switch {
		case sent < len(lines) && errors.Is(stop, client.ErrNoAnswer):
			// The request may have been served and its answer lost.
			fmt.Fprintf(env.Stderr, "tickflow send-many: lines %d to %d: no answer, so some may be queued; with an idempotency_key on each line, send the file again\n", lines[sent].line, lines[len(lines)-1].line)
		case sent < len(lines):
			fmt.Fprintf(env.Stderr, "tickflow send-many: lines %d to %d not sent\n", lines[sent].line, lines[len(lines)-1].line)
		}
		switch {
		case stop != nil && !errors.Is(stop, first):
			return stop
		case first != nil:
			queued := 0
			for _, r := range out {
				if !r.Failed() {
					queued++
				}
			}
			return &manyError{msg: fmt.Sprintf("%d of %d batches queued; the first refused: %s", queued, len(lines), message(first)), err: first}
		}
		return nil
	})
}

// read reads and checks every line of the file before anything is sent,
// so that a bad line sends nothing.
func (c *SendManyCmd) read(stdin io.Reader) ([]manyLine, error) {
	name, r := c.File, stdin
	if c.File == "-" {
		name = "stdin"
	} else {
		f, err := os.Open(c.File)
		if err != nil {
			return nil, usage("read the batches: %v", err)
		}
		defer func() { _ = f.Close() }() // read only: the reads reported what went wrong
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var out []manyLine
	for n := 1; sc.Scan(); n++ {
		data := bytes.TrimSpace(sc.Bytes())
		if len(data) == 0 {
			continue
		}
		req, err := parseBatch(fmt.Sprintf("%s:%d", name, n), data)
		if err != nil {
			return nil, err
		}
		if req.Label == "" {
			req.Label = c.Label
		}
		if req.Label == "" {
			return nil, usage("%s:%d: no label: give one on the line, or --label", name, n)
		}
		if len(req.Functions) == 0 {
			return nil, usage("%s:%d: no functions", name, n)
		}
		out = append(out, manyLine{line: n, req: *req})
	}
	if err := sc.Err(); err != nil {
		return nil, usage("read %s: %v (a line may hold at most 1 MiB)", name, err)
	}
	return out, nil
}

// print writes one result a batch: a table, or with --json one object a
// line (JSON Lines), each with its line number.
func (c *SendManyCmd) print(g *Globals, env *Env, out []manyResult) error {
	if g.JSON {
		for _, r := range out {
			if err := printJSONLine(env.Stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	t := newTable(env.Stdout, "LINE", "ID", "DOMAIN", "PRIORITY", "RUN AT", "DUPLICATE", "ERROR")
	for _, r := range out {
		if r.Failed() {
			t.row(r.Line, "-", "-", "-", "-", "-", fmt.Sprintf("%d %s", r.Code, r.Error))
			continue
		}
		runAt, dup := "now", "no"
		if !r.RunAt.IsZero() {
			runAt = stamp(r.RunAt)
		}
		if r.Duplicate {
			dup = "yes"
		}
		t.row(r.Line, r.ID, r.Domain, r.Priority, runAt, dup, "-")
	}
	return t.flush()
}

// lineError is a batch refused, with its line.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// manyError says how many batches of a send-many were queued and which was
// refused first; it matches (and exits as) the first refusal.
type manyError struct {
	msg string
	err error
}

func (e *manyError) Error() string { return e.msg }
func (e *manyError) Unwrap() error { return e.err }
