// Command quickstart is the worker of the handler contract's quick start
// (docs/api.md): it serves one function type, greet.hello, whose payload
// struct has json tags, next to the system `make run` runs.
//
//	NATS_URL=nats://127.0.0.1:4222 go run ./examples/quickstart
//
// It connects as the worker user of nats.conf (NATS_USER and NATS_PASSWORD
// name another) and runs until Ctrl-C.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/conn"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/worker"
)

// TypeHello is the function type the quick start registers; the label that
// lets users submit it names it under functions.
const TypeHello = "greet.hello"

// Greeting is greet.hello's payload. A field is read under its msgpack tag,
// else its json tag, else its Go name; a key no field is named for, or a
// value of the wrong type, fails the function with an error naming it.
type Greeting struct {
	Name  string `json:"name"`
	Shout bool   `json:"shout,omitempty"`
}

// Reply is greet.hello's output, which the batch's outputs show as JSON.
type Reply struct {
	Message string `json:"message"`
}

// Hello handles greet.hello.
func Hello(_ context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var g Greeting
	if err := call.Payload.Decode(&g); err != nil {
		return pipeline.Result{}, err // permanent already: no retry changes a payload
	}
	if g.Name == "" {
		return pipeline.Result{}, pipeline.Permanent(errors.New("greet.hello: the payload needs a name"))
	}
	msg := "hello " + g.Name
	if g.Shout {
		msg = "HELLO " + g.Name + "!"
	}
	return pipeline.Result{Data: pipeline.MustPayload(Reply{Message: msg})}, nil
}

// NewMux registers the quick start's one handler.
func NewMux() *pipeline.ServeMux {
	mux := pipeline.NewServeMux()
	mux.RegisterFunc(TypeHello, Hello)
	return mux
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	user, password := os.Getenv("NATS_USER"), os.Getenv("NATS_PASSWORD")
	if user == "" {
		user, password = "worker", "local-worker"
	}
	// An empty URL is nats://127.0.0.1:4222, where `make run` listens.
	nc, err := conn.Dial(config.NATS{URL: os.Getenv("NATS_URL"), User: user, Password: password, Name: "quickstart"}, "worker", log)
	if err != nil {
		return err
	}
	defer nc.Close() // drains what is still to be sent
	w, err := worker.New(ctx, nc.Conn, NewMux(), worker.Options{Logger: log})
	if err != nil {
		return err
	}
	log.Info("quickstart serving", "type", TypeHello)
	return w.Run(ctx)
}
