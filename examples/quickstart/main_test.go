package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

func TestMain(m *testing.M) {
	testnats.VerifyTestMain(m)
}

// label is the quick start's label, as docs/api.md shows it.
const label = `
labels:
  greetings:
    domain: payments
    users: [alice]
    mode: non_atomic
    priority: med
    functions:
      greet.hello: {}
`

// TestQuickstart runs the quick start as docs/api.md walks through it: the
// label, the worker, a send with a JSON payload; the json-tagged struct
// receives it, and a payload with a key it has no field for fails with an
// error naming the key.
func TestQuickstart(t *testing.T) {
	env := testnats.Start(t, []string{"payments"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	table := filepath.Join(t.TempDir(), "authz.yaml")
	if err := os.WriteFile(table, []byte(label), 0o600); err != nil {
		t.Fatal(err)
	}
	az, err := authz.New(ctx, env.Conn(t, "authz"), authz.Options{Owner: "owner", TablePath: table})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(ctx, env.Conn(t, "worker"), NewMux(), worker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: "payments"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 3)
	go func() { _ = az.Run(ctx); done <- struct{}{} }()
	go func() { _ = w.Run(ctx); done <- struct{}{} }()
	go func() { _ = proc.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done; <-done }()
	alice, err := client.New(env.Conn(t, "alice"), "alice", client.Config{})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		payload string
		// want is in the output when the batch executed, else in its reason.
		want     string
		executed bool
	}{
		{name: "json tags receive the payload", payload: `{"name":"ada"}`, want: `{"message":"hello ada"}`, executed: true},
		{name: "every field", payload: `{"name":"ada","shout":true}`, want: `{"message":"HELLO ada!"}`, executed: true},
		{name: "a key no field is named for", payload: `{"nmae":"ada"}`, want: `payload key "nmae" matches no field`},
		{name: "a value of the wrong type", payload: `{"name":7}`, want: `payload key "name" into field Name string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The payload as `nats req` sends it: JSON in the send request.
			var req api.SendRequest
			body := `{"label":"greetings","functions":[{"type":"greet.hello","payload":` + tt.payload + `}]}`
			if err := json.Unmarshal([]byte(body), &req); err != nil {
				t.Fatal(err)
			}
			var sent *api.SendReply
			testnats.Eventually(t, 5*time.Second, "authz serving", func() bool {
				sent, err = alice.Send(ctx, req)
				return err == nil
			})
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			rep, err := alice.Wait(wctx, sent.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got := rep.Record.Status == pipeline.Executed; got != tt.executed {
				t.Fatalf("outcome %s, want executed %v", rep.Record.Outcome, tt.executed)
			}
			said := rep.Record.Outcome.String()
			if tt.executed {
				out, _ := json.Marshal(rep.Outputs[0].Data)
				said = string(out)
			}
			if !strings.Contains(said, tt.want) {
				t.Fatalf("%s does not say %s", said, tt.want)
			}
		})
	}
}
