package worker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/local"
	"github.com/tickflow/tickflow/pipeline"
)

// A handler of your own, end to end: package local runs authz, a processor
// and a worker serving the handler in this process; alice submits a batch
// and the handler executes it, seeing who submitted it. Deployed, the same
// mux goes to worker.New in a process of its own.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The handlers: one function type, told who submitted the batch.
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("greet", func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
		var name string
		if err := call.Payload.Decode(&name); err != nil {
			return pipeline.Result{}, pipeline.Permanent(err)
		}
		return pipeline.Result{Data: pipeline.MustPayload("hello " + name + ", from " + call.Submitter)}, nil
	})

	// A table that lets alice submit greetings.
	sys, err := local.Start(ctx, local.Options{Mux: mux, Table: []byte(`
labels:
  greetings:
    domain: billing
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      greet: {}
`)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = sys.Close() }()

	// alice submits; authz knows her from the subject she may publish on.
	alice, err := sys.Client("alice", client.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := api.SendRequest{Label: "greetings", Functions: api.Calls{{Type: "greet", Payload: pipeline.MustPayload("bob")}}}
	sent, err := alice.Send(ctx, req)
	for errors.Is(err, client.ErrNotRunning) { // authz is still starting
		time.Sleep(10 * time.Millisecond)
		sent, err = alice.Send(ctx, req)
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := alice.Wait(ctx, sent.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	var greeting string
	_ = rep.Outputs[0].Data.Decode(&greeting)
	fmt.Println(greeting)
	fmt.Println(rep.Record.Outcome)
	// Output:
	// hello bob, from alice
	// Executed
}
