package client_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/local"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
)

// alice submits a batch through the client and waits for its outcome and
// output; the owner lists the domain's queue; a batch nobody knows is
// ErrNotFound. The system runs in this process (package local), in the
// tick pace, so that the batch waits in its queue until a tick.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("invoice", func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
		return pipeline.Result{Data: pipeline.MustPayload("INV-001")}, nil
	})
	sys, err := local.Start(ctx, local.Options{Mux: mux, Pace: processor.PaceTick, Table: []byte(`
labels:
  invoices:
    domain: billing
    users: [alice]
    mode: atomic
    priority: med
    functions: {invoice: {}}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = sys.Close() }()
	alice, err := sys.Client("alice", client.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	owner, err := sys.Client("owner", client.Config{Timeout: 2 * time.Second})
	if err != nil {
		fmt.Println(err)
		return
	}

	// authz may still be starting: ErrNotRunning is safe to retry, and the
	// idempotency key makes any send safe to retry.
	req := api.SendRequest{Label: "invoices", IdempotencyKey: "invoice-2024-001",
		Functions: api.Calls{{Type: "invoice", Payload: pipeline.MustPayload(map[string]int{"amount": 120})}}}
	sent, err := alice.Send(ctx, req)
	for errors.Is(err, client.ErrNotRunning) {
		time.Sleep(10 * time.Millisecond)
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

	// A tick runs the batch (a ticker process ticks on an interval; in the
	// ready pace, the default, nothing waits for one). Wait returns the
	// batch's record and every function's output once it finished. A
	// token just queued can reach the queue's consumer a moment after the
	// send's answer: tick until the tick takes its step.
	for {
		tick, err := sys.Tick(ctx, "billing", 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		if len(tick.Steps) > 0 {
			break
		}
		if ctx.Err() != nil {
			fmt.Println(ctx.Err())
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	rep, err := alice.Wait(ctx, sent.ID)
	if err != nil {
		fmt.Println(err)
		return
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
