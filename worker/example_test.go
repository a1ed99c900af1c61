package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// A worker of your own, end to end on an embedded nats-server: alice
// submits a batch through authz, a processor runs it one step per tick, and
// the worker's handler executes it, seeing who submitted it.
func Example() {
	dir, _ := os.MkdirTemp("", "tickflow-example")
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
	dial := func(user string) *conn.Conn {
		c, err := conn.Dial(config.NATS{User: user, Password: "local-" + user}, user, log, srv.InProcess())
		if err != nil {
			panic(err)
		}
		return c
	}

	// Provision the domain's streams, consumers and buckets, as admin.
	admin := dial("admin")
	defer admin.Close()
	js, _ := jetstream.New(admin.Conn)
	if err := streams.Provision(ctx, js, streams.DefaultSettings(), "billing"); err != nil {
		fmt.Println(err)
		return
	}

	// The worker: one handler, told who submitted the batch.
	greetings := make(chan string, 1)
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("greet", func(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
		var name string
		if err := call.Payload.Decode(&name); err != nil {
			return pipeline.Result{}, pipeline.Permanent(err)
		}
		greeting := "hello " + name + ", from " + call.Submitter
		greetings <- greeting
		return pipeline.Result{Data: pipeline.MustPayload(greeting)}, nil
	})
	wc := dial("worker")
	defer wc.Close()
	w, err := worker.New(ctx, wc.Conn, mux, worker.Options{Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}

	// authz, with a table that lets alice submit greetings.
	table, err := authz.ParseTable([]byte(`
labels:
  greetings:
    domain: billing
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      greet: {}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ac := dial("authz")
	defer ac.Close()
	az, err := authz.New(ctx, ac.Conn, authz.Options{Table: table, Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}
	pc := dial("processor")
	defer pc.Close()
	p, err := processor.New(ctx, pc.Conn, processor.Options{Domain: "billing", Logger: log})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan struct{}, 2)
	go func() { _ = w.Run(ctx); done <- struct{}{} }()
	go func() { _ = az.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()

	// alice submits; authz knows her from the subject she may publish on.
	alice := dial("alice")
	defer alice.Close()
	request := func(user, op string, body any, out any) error {
		data, _ := json.Marshal(body)
		for {
			m, err := alice.Request(streams.AuthzSubject(user, op), data, time.Second)
			if err != nil {
				continue // authz is still starting
			}
			if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
				return fmt.Errorf("%s: %s", code, m.Header.Get("Nats-Service-Error"))
			}
			return json.Unmarshal(m.Data, out)
		}
	}
	var sent api.SendReply
	if err := request("alice", "send", map[string]any{"label": "greetings",
		"functions": []map[string]any{{"type": "greet", "payload": "bob"}}}, &sent); err != nil {
		fmt.Println(err)
		return
	}

	// Tick until the batch is finished (a ticker process does this on an interval).
	for {
		p.Tick(ctx, 1)
		var rep api.BatchReply
		if err := request("alice", "batch", map[string]any{"id": sent.ID}, &rep); err != nil {
			fmt.Println(err)
			return
		}
		if rep.Record.Status.Terminal() {
			fmt.Println(<-greetings)
			fmt.Println(rep.Record.Outcome)
			return
		}
	}
	// Output:
	// hello bob, from alice
	// Executed
}
