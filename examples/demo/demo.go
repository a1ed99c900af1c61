// Package demo submits the mixed workload `make run` shows: atomic and
// non-atomic batches, High and Med, one that waits for a confirmation, one
// that retries, and ones that fail into the dead letter queue. It speaks to
// authz the way any Go program does, through the client package, as the
// users of nats.conf.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/examples/underwriting"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/x/steps"
)

// IdempotencyKey is the idempotency key of the demo's first submission,
// which records in the store that the demo ran there.
const IdempotencyKey = "tickflow-demo"

// ErrRanBefore is returned by Run when the store already holds the demo's
// work: Run then submits nothing.
var ErrRanBefore = errors.New("demo: the demo ran in this store before, and submits nothing again")

// Clients are the connections the demo speaks through, one per identity,
// each made as its user with the user's inbox prefix (streams.Connect).
type Clients struct {
	Alice, Bob, Oracle, Owner *nats.Conn
}

// Row is one line of the summary.
type Row struct {
	ID       uint64
	What     string
	Label    string
	Domain   string
	Priority pipeline.Priority
	Mode     pipeline.Mode
	Status   pipeline.Status
	Outcome  string
	// Attempts counts the batch's executions: a clean batch of two
	// functions executed two, one retried once three.
	Attempts int
}

type submission struct {
	what  string
	by    *client.Client
	req   api.SendRequest
	reply api.SendReply
	// afterPrevious holds the submission until the one before it finished,
	// so an outcome that depends on another's effect (a balance) reads the
	// same on every run.
	afterPrevious bool
}

// Run submits the workload, confirms what needs confirming, waits until
// every batch is finished, and returns the summary. Its http.post functions
// call echo, which the worker's http.post must open (Echo.Addr).
func Run(ctx context.Context, conns Clients, echo *Echo, log *slog.Logger) ([]Row, error) {
	c, err := newUsers(conns)
	if err != nil {
		return nil, err
	}
	post := func(body string) pipeline.Payload {
		return pipeline.MustPayload(handlers.HTTPRequest{URL: echo.URL(), Body: body})
	}
	// The ledger moves only the submitter's own money: alice's transfers are from alice.
	subs := []*submission{
		{what: "two transfers, all or nothing", by: c.alice, req: api.SendRequest{Label: "transfer", Functions: []api.CallSpec{
			{Type: handlers.TypeTransfer, Payload: pipeline.MustPayload(handlers.Transfer{From: "alice", To: "bob", Amount: 50})},
			{Type: handlers.TypeTransfer, Payload: pipeline.MustPayload(handlers.Transfer{From: "alice", To: "carol", Amount: 20})},
		}}},
		{what: "overdraft: rolled back, dead letter", by: c.alice, afterPrevious: true, req: api.SendRequest{Label: "transfer", Functions: []api.CallSpec{
			{Type: handlers.TypeTransfer, Payload: pipeline.MustPayload(handlers.Transfer{From: "alice", To: "bob", Amount: 10})},
			{Type: handlers.TypeTransfer, Payload: pipeline.MustPayload(handlers.Transfer{From: "alice", To: "carol", Amount: 1_000_000})},
		}}},
		{what: "job: flaky step retried, then an HTTP call", by: c.bob, req: api.SendRequest{Label: "jobs", Functions: []api.CallSpec{
			{Type: handlers.TypeNoop},
			{Type: handlers.TypeFlaky, Payload: pipeline.MustPayload(handlers.FlakyArgs{FailAttempts: 2})},
			{Type: handlers.TypeHTTP, Payload: post("report ready")},
		}}},
		{what: "job failing at its 2nd step: dead letter", by: c.bob, req: api.SendRequest{Label: "jobs", Functions: []api.CallSpec{
			{Type: handlers.TypeNoop},
			{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{})},
			{Type: handlers.TypeNoop},
		}}},
		{what: "job whose failure a fallback handles", by: c.alice, req: api.SendRequest{Label: "jobs", Functions: []api.CallSpec{
			{Type: handlers.TypeFail, Payload: pipeline.MustPayload(handlers.FailArgs{Fallback: true})},
		}}},
		{what: "underwriting: form, bank statement, report", by: c.bob, req: api.SendRequest{Label: "underwriting", Functions: []api.CallSpec{
			{Type: underwriting.TypeApplicationForm, Payload: document("s_application_form", map[string]any{
				"business_name": "ACME Corp", "business_ein": DemoEIN, "requested_amount": 50000, "years_in_business": 3, "industry": "retail"})},
			{Type: underwriting.TypeBankStatement, Payload: document("s_bank_statement", map[string]any{
				"account_holder": "Acme, Inc.", "months": []map[string]any{{"month": "2025-07", "deposits": 40000, "ending_balance": 2500}}})},
			{Type: underwriting.TypeClearBusinessReport, Payload: pipeline.MustPayload(steps.Request{SubjectID: "UW-1"})},
		}}},
		{what: "chain: dispatch on zkapp-1, polled until included", by: c.alice, req: api.SendRequest{Label: "chain", Key: "zkapp-1", Functions: []api.CallSpec{
			{Type: handlers.TypeDispatch, Payload: pipeline.MustPayload(handlers.DispatchArgs{Method: "vote"})},
		}}},
		{what: "chain: dispatch on zkapp-2, dropped once, fee raised", by: c.bob, req: api.SendRequest{Label: "chain", Key: "zkapp-2", Functions: []api.CallSpec{
			{Type: handlers.TypeDispatch, Payload: pipeline.MustPayload(handlers.DispatchArgs{Method: "commit", DropAttempts: 1})},
		}}},
		{what: "chain: zkapp-1 again, waits for a free sender", by: c.alice, req: api.SendRequest{Label: "chain", Key: "zkapp-1", Functions: []api.CallSpec{
			{Type: handlers.TypeDispatch, Payload: pipeline.MustPayload(handlers.DispatchArgs{Method: "vote"})},
		}}},
		{what: "settlement waiting for a confirmation", by: c.alice, req: api.SendRequest{Label: "settlement", Functions: []api.CallSpec{
			{Type: handlers.TypeNoop, Expect: "block-17"},
			{Type: handlers.TypeHTTP, Payload: post("settled")},
		}}},
	}
	for i, s := range subs {
		// The first submission's idempotency key marks the store as one
		// the demo ran in: a second run answers it as a duplicate (or, once
		// its record expired, as a conflict) and submits nothing more, so
		// a restart adds no work and no dead letters.
		if i == 0 {
			s.req.IdempotencyKey = IdempotencyKey
		}
		if s.afterPrevious {
			if err := waitFinished(ctx, c.owner, subs[i-1].reply.ID); err != nil {
				return nil, err
			}
		}
		rep, err := whileStarting(ctx, func() (*api.SendReply, error) { return s.by.Send(ctx, s.req) })
		if i == 0 && errors.Is(err, client.ErrConflict) {
			return nil, fmt.Errorf("%w (%v)", ErrRanBefore, err)
		}
		if err != nil {
			return nil, fmt.Errorf("demo: %s: %w", s.what, err)
		}
		if i == 0 && rep.Duplicate {
			return nil, fmt.Errorf("%w (its first batch is %d)", ErrRanBefore, rep.ID)
		}
		s.reply = *rep
		log.Info("demo: batch submitted", "batch_id", s.reply.ID, "what", s.what, "label", s.req.Label, "user", s.by.User())
	}
	confirmed := map[uint64]bool{}
	rows := make([]Row, 0, len(subs))
	for _, s := range subs {
		for {
			rep, err := whileStarting(ctx, func() (*api.BatchReply, error) { return c.owner.Batch(ctx, api.IDRequest{ID: s.reply.ID}) })
			if err != nil {
				return nil, err
			}
			rec := rep.Record
			if rec.Status.Terminal() {
				rows = append(rows, Row{ID: rec.Batch.ID, What: s.what, Label: rec.Batch.Label, Domain: rec.Batch.Domain,
					Priority: rec.Batch.Priority, Mode: rec.Batch.Subroutine.Mode, Status: rec.Status,
					Outcome: rec.Outcome.String(), Attempts: rec.Attempts})
				break
			}
			if p := rep.Progress; p != nil && p.State == api.StateParked && rec.Batch.Functions[p.Parked.Index].Confirm != nil && !confirmed[rec.Batch.ID] {
				f := rec.Batch.Functions[p.Parked.Index]
				log.Info("demo: oracle confirms", "batch_id", rec.Batch.ID, "function", p.Parked.Index, "content", f.Confirm.Expect)
				req := api.ConfirmRequest{ID: rec.Batch.ID, Index: p.Parked.Index, Content: f.Confirm.Expect}
				if _, err := whileStarting(ctx, func() (*api.ConfirmReply, error) { return c.oracle.Confirm(ctx, req) }); err != nil {
					return nil, err
				}
				confirmed[rec.Batch.ID] = true
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].ID < rows[j].ID })
	return rows, nil
}

// users are the demo's users, each a client over its own connection.
type users struct {
	alice, bob, oracle, owner *client.Client
}

func newUsers(conns Clients) (*users, error) {
	var c users
	for _, u := range []struct {
		user string
		nc   *nats.Conn
		dst  **client.Client
	}{{"alice", conns.Alice, &c.alice}, {"bob", conns.Bob, &c.bob}, {"oracle", conns.Oracle, &c.oracle}, {"owner", conns.Owner, &c.owner}} {
		cl, err := client.New(u.nc, u.user, client.Config{})
		if err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		*u.dst = cl
	}
	return &c, nil
}

// whileStarting calls f again, every 100ms, while authz is not running
// yet: the demo starts with the services it talks to.
func whileStarting[R any](ctx context.Context, f func() (R, error)) (R, error) {
	for {
		r, err := f()
		if !errors.Is(err, client.ErrNotRunning) {
			return r, err
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitFinished polls, as the owner, until batch id is terminal.
func waitFinished(ctx context.Context, owner *client.Client, id uint64) error {
	for {
		rep, err := whileStarting(ctx, func() (*api.BatchReply, error) { return owner.Batch(ctx, api.IDRequest{ID: id}) })
		if err != nil {
			return err
		}
		if rep.Record.Status.Terminal() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Print writes the summary as a table.
func Print(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLABEL\tDOMAIN\tPRIORITY\tMODE\tOUTCOME\tEXECUTIONS\tWHAT")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.Label, r.Domain, r.Priority, r.Mode, r.Outcome, r.Attempts, r.What)
	}
	_ = tw.Flush()
}

// DemoEIN is the business the underwriting example is about.
const DemoEIN = "123456789"

// DemoRecords are the public records the demo's report finds.
var DemoRecords = underwriting.StaticRecords{DemoEIN: {UCCFilings: 1}}

// document is a step-pipeline payload carrying one stipulation as JSON.
func document(name string, content any) pipeline.Payload {
	raw, _ := json.Marshal(content)
	return pipeline.MustPayload(steps.Request{SubjectID: "UW-1", Stipulations: []steps.Document{{Name: name, Content: raw}}})
}

// Echo is the local HTTP endpoint the demo's http.post functions call. It
// listens on loopback, which http.post refuses unless its allow list opens
// it: the demo's configuration opens exactly Addr, nothing else.
type Echo struct {
	// Addr is the address and port it listens on, as an allow entry of
	// handlers.NewHTTP.
	Addr string
	srv  *http.Server
	done chan struct{}
}

// StartEcho starts the endpoint on a free loopback port; Close stops it.
func StartEcho() (*Echo, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo: echo endpoint: %w", err)
	}
	e := &Echo{Addr: ln.Addr().String(), done: make(chan struct{}), srv: &http.Server{ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
			fmt.Fprintf(w, "received %q (idempotency key %s)", strings.TrimSpace(string(b)), r.Header.Get("Idempotency-Key"))
		})}}
	go func() { defer close(e.done); _ = e.srv.Serve(ln) }()
	return e, nil
}

// URL is the endpoint the demo posts to.
func (e *Echo) URL() string { return "http://" + e.Addr + "/hook" }

// Close stops the endpoint and waits for it to stop serving.
func (e *Echo) Close() error {
	err := e.srv.Close()
	<-e.done
	return err
}
