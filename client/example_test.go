package client_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// alice submits a batch through the client and waits for its outcome and
// output; the owner lists the domain's queue; a batch nobody knows is
// ErrNotFound. All on an embedded nats-server, with authz, a processor and
// a worker.
func Example() {
	dir, _ := os.MkdirTemp("", "tickflow-client-example")
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory
	srv, err := embedded.Start(embedded.Options{ConfigFile: "../nats.conf", DataDir: dir, DontListen: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// conn.Dial connects as a role with the role's inbox prefix, into
	// which alone authz answers.
	dial := func(user string) *conn.Conn {
		c, err := conn.Dial(config.NATS{User: user, Password: "local-" + user}, user, log, srv.InProcess())
		if err != nil {
			panic(err)
		}
		return c
	}
	admin := dial("admin")
	defer admin.Close()
	js, _ := jetstream.New(admin.Conn)
	if err := streams.Provision(ctx, js, streams.DefaultSettings(), "billing"); err != nil {
		fmt.Println(err)
		return
	}
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("invoice", func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload("INV-001")}, nil
	})
	wc, ac, pc := dial("worker"), dial("authz"), dial("processor")
	defer wc.Close()
	defer ac.Close()
	defer pc.Close()
	w, err := worker.New(ctx, wc.Conn, mux, worker.Options{Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}
	table, _ := authz.ParseTable([]byte("labels:\n  invoices:\n    domain: billing\n    users: [alice]\n    mode: atomic\n    priority: med\n    functions: {invoice: {}}\n"))
	az, err := authz.New(ctx, ac.Conn, authz.Options{Table: table, Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := processor.New(ctx, pc.Conn, processor.Options{Domain: "billing", Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _ = w.Run(ctx); done <- struct{}{} }()
	go func() { _ = az.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	aliceConn, ownerConn := dial("alice"), dial("owner")
	defer aliceConn.Close()
	defer ownerConn.Close()
	alice, err := client.New(aliceConn.Conn, "alice", client.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	owner, err := client.New(ownerConn.Conn, "owner", client.Config{Timeout: 2 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}

	// authz is still starting: ErrNotRunning is safe to retry, and the
	// idempotency key makes any send safe to retry.
	req := api.SendRequest{Label: "invoices", IdempotencyKey: "invoice-2024-001",
		Functions: api.Calls{{Type: "invoice", Payload: pipeline.MustPayload(map[string]int{"amount": 120})}}}
	sent, err := alice.Send(ctx, req)
	for errors.Is(err, client.ErrNotRunning) {
		select {
		case <-ctx.Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
		sent, err = alice.Send(ctx, req)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("sent to", sent.Domain, sent.Priority)

	q, err := owner.Queue(ctx, api.QueueRequest{Domain: "billing", Priority: pipeline.Med})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("queue length", q.Length, "first is ours:", q.Items[0].ID == sent.ID)

	// Wait for the outcome without polling, while the processor ticks (a
	// ticker process does this on an interval): Wait returns the batch's
	// record and every function's output once it finished.
	waited := make(chan error, 1)
	var rep *api.BatchReply
	go func() {
		var err error
		rep, err = alice.Wait(ctx, sent.ID)
		waited <- err
	}()
	for ticking := true; ticking; {
		select {
		case err := <-waited:
			if err != nil {
				fmt.Println(err)
				return
			}
			ticking = false
		default:
			p.Tick(ctx, 1)
		}
	}
	var invoice string
	_ = rep.Outputs[0].Data.Decode(&invoice)
	fmt.Println(rep.Record.Outcome, invoice)

	// A submitter pages through their own batches, newest first.
	page, err := alice.List(ctx, api.ListRequest{Status: pipeline.Executed, Limit: 10})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("alice's executed batches:", len(page.Items), "more:", page.Next != 0)

	_, err = alice.Batch(ctx, api.IDRequest{ID: sent.ID + 100})
	var ae *client.Error
	if errors.As(err, &ae) {
		fmt.Println(ae.Op, ae.Code, errors.Is(err, client.ErrNotFound))
	}
	_, err = alice.Pause(ctx, api.DomainRequest{Domain: "billing"})
	fmt.Println("alice pauses:", errors.Is(err, client.ErrForbidden))
	// Output:
	// sent to billing med
	// queue length 1 first is ours: true
	// Executed INV-001
	// alice's executed batches: 1 more: false
	// batch 404 true
	// alice pauses: true
}
