package authz_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// TestTrailingDataRefused: a body with anything after its JSON object is
// refused whole, by every operation.
func TestTrailingDataRefused(t *testing.T) {
	b := setup(t)
	tests := []struct {
		name, user, op, body string
	}{
		{name: "send", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop"}]}{"label":"transfer"}`},
		{name: "send, garbage after", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop"}]} x`},
		{name: "send, closing brace after", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop"}]}}`},
		{name: "batch", user: "alice", op: "batch", body: `{"id":1}{"id":2}`},
		{name: "queue", user: "owner", op: "queue", body: `{"domain":"pay","priority":"med"} []`},
		{name: "pause", user: "owner", op: "pause", body: `{"domain":"pay"}{"domain":"other"}`},
		{name: "resume", user: "owner", op: "resume", body: `{"domain":"pay"} 1`},
		{name: "evict", user: "owner", op: "evict", body: `{"domain":"pay","priority":"med","position":0}{}`},
		{name: "insert", user: "owner", op: "insert", body: `{"domain":"pay","priority":"med","position":0,"label":"jobs","functions":[{"type":"noop"}]}{}`},
		{name: "dlq", user: "owner", op: "dlq", body: `{"domain":"pay"} null`},
		{name: "replay", user: "owner", op: "replay", body: `{"seq":1}{"seq":2}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := b.raw(t, tt.user, tt.op, []byte(tt.body))
			if e == nil || e.Code != "400" || !strings.Contains(e.Msg, "trailing data after the JSON object") {
				t.Fatalf("got %+v, want a 400 about trailing data", e)
			}
		})
	}
	if q := b.queue(t, pipeline.Med); len(q) != 0 {
		t.Fatalf("a refused request queued %v", q)
	}
	if rep := b.proc.Tick(b.ctx, 1); rep.Status == api.TickPaused {
		t.Fatal("a refused pause paused the domain")
	}
}

// TestPayloadNumbersRoundTrip: numbers come back exactly as sent, in the
// batch reply and in the handler's Call.Payload.
func TestPayloadNumbersRoundTrip(t *testing.T) {
	b := setup(t)
	payload := `{"big":12345678901234567890,"list":[100,2.5],"max":18446744073709551615,"min":-9223372036854775808,"tenth":0.1}` // keys sorted, as the reply writes them
	m, e := b.raw(t, "alice", "send", []byte(`{"label":"jobs","functions":[{"type":"noop","payload":`+payload+`}]}`))
	if e != nil {
		t.Fatal(e)
	}
	var sent api.SendReply
	if err := json.Unmarshal(m.Data, &sent); err != nil {
		t.Fatal(err)
	}
	m, e = b.raw(t, "alice", "batch", []byte(fmt.Sprintf(`{"id":%d}`, sent.ID)))
	if e != nil {
		t.Fatal(e)
	}
	if !bytes.Contains(m.Data, []byte(`"payload":`+payload)) {
		t.Fatalf("batch reply %s does not carry the payload %s as sent", m.Data, payload)
	}
	b.settled(t, sent.ID)
	v, ok := b.calls.Payload(key(sent.ID))
	if !ok {
		t.Fatal("the handler never ran")
	}
	var got map[string]any
	if err := v.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got["big"] != uint64(12345678901234567890) || got["max"] != uint64(18446744073709551615) || fmt.Sprint(got["min"]) != "-9223372036854775808" || got["tenth"] != 0.1 {
		t.Fatalf("handler got %#v", got)
	}
}

// TestUnkeepableNumbersRefused: a number that would come back changed is
// refused with a 400 naming the field, and nothing is recorded.
func TestUnkeepableNumbersRefused(t *testing.T) {
	b := setup(t)
	tests := []struct {
		name, user, op, body, field string
	}{
		{name: "infinite", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop","payload":{"amount":1e999}}]}`, field: "functions[0].payload.amount"},
		{name: "negative infinite", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop"},{"type":"noop","payload":[-1e999]}]}`, field: "functions[1].payload[0]"},
		{name: "integer above uint64", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop","payload":12345678901234567890123}]}`, field: "functions[0].payload"},
		{name: "more digits than a float64", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop","payload":{"pi":3.14159265358979323846}}]}`, field: "functions[0].payload.pi"},
		{name: "repeated key", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop","payload":{"to":"bob","to":"eve"}}]}`, field: "functions[0].payload.to"},
		{name: "insert", user: "owner", op: "insert", body: `{"domain":"pay","priority":"med","position":0,"label":"jobs","functions":[{"type":"noop","payload":1e999}]}`, field: "functions[0].payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := b.raw(t, tt.user, tt.op, []byte(tt.body))
			if e == nil || e.Code != "400" || !strings.Contains(e.Msg, tt.field+":") {
				t.Fatalf("got %+v, want a 400 naming %s", e, tt.field)
			}
		})
	}
	if q := b.queue(t, pipeline.Med); len(q) != 0 {
		t.Fatalf("a refused request queued %v", q)
	}
}

// TestQueueEmptyIsAList: an empty queue answers "items":[], as dlq does.
func TestQueueEmptyIsAList(t *testing.T) {
	b := setup(t)
	for op, body := range map[string]string{"queue": `{"domain":"pay","priority":"med"}`, "dlq": `{"domain":"pay"}`} {
		m, e := b.raw(t, "owner", op, []byte(body))
		if e != nil {
			t.Fatalf("%s: %+v", op, e)
		}
		if !bytes.Contains(m.Data, []byte(`"items":[]`)) {
			t.Fatalf("%s answered %s, want \"items\":[]", op, m.Data)
		}
	}
}

// TestNotProvisioned: authz started before provisioning says so.
func TestNotProvisioned(t *testing.T) {
	env := testnats.Start(t, nil)
	table, err := authz.ParseTable([]byte(tableYAML))
	if err != nil {
		t.Fatal(err)
	}
	_, err = authz.New(testnats.Context(t, 10*time.Second), env.Conn(t, "authz"), authz.Options{Table: table})
	if !errors.Is(err, authz.ErrNotProvisioned) || !strings.Contains(err.Error(), "provision first") || !strings.Contains(err.Error(), "batches") {
		t.Fatalf("New before provisioning: %v, want ErrNotProvisioned naming what is missing", err)
	}
}

// TestUntrustedInputCapped: what a caller sends shows in error messages
// and logs only as a capped prefix.
func TestUntrustedInputCapped(t *testing.T) {
	b := setup(t)
	long := strings.Repeat("x", 3000)
	tests := []struct {
		name, user, op, body, code string
	}{
		{name: "label", user: "alice", op: "send", body: `{"label":"` + long + `","functions":[{"type":"noop"}]}`, code: "404"},
		{name: "unknown field", user: "alice", op: "send", body: `{"` + long + `":1}`, code: "400"},
		{name: "unknown field of a function", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop","` + long + `":1}]}`, code: "400"},
		{name: "function type", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"` + long + `"}]}`, code: "400"},
		{name: "number", user: "alice", op: "batch", body: `{"id":1` + strings.Repeat("0", 3000) + `}`, code: "400"},
		{name: "payload key", user: "alice", op: "send", body: `{"label":"jobs","functions":[{"type":"noop","payload":{"` + long + `":1,"` + long + `":2}}]}`, code: "400"},
		{name: "insert label", user: "owner", op: "insert", body: `{"domain":"pay","priority":"med","label":"` + long + `","functions":[{"type":"noop"}]}`, code: "404"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, e := b.raw(t, tt.user, tt.op, []byte(tt.body))
			if e == nil || e.Code != tt.code || len(e.Msg) > 400 || !strings.Contains(e.Msg, " bytes)") || strings.Contains(e.Msg, long[:100]) || strings.Contains(e.Msg, strings.Repeat("0", 100)) {
				t.Fatalf("got %.400v, want a %s with the input capped", e, tt.code)
			}
		})
	}
	key := api.SendRequest{Label: "jobs", Functions: []api.CallSpec{noop()}, IdempotencyKey: long}
	if e := b.call(t, "alice", api.OpSend, key, nil); e != nil {
		t.Fatal(e)
	}
	key.Label = "transfer"
	if e := b.call(t, "alice", api.OpSend, key, nil); e == nil || e.Code != "409" || len(e.Msg) > 400 {
		t.Fatalf("reused key: %.400v, want a 409 with the key capped", e)
	}

	// A reply subject outside the caller's inbox is logged capped.
	b.stop()
	logs := &testnats.LogBuffer{}
	svc, err := authz.New(b.ctx, b.env.Conn(t, "authz"), authz.Options{Table: b.svc.Table(), Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(b.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); testnats.Stopped(t, "authz", done) })
	nc := b.env.Conn(t, "alice")
	m := nats.NewMsg(streams.AuthzSubject("alice", api.OpBatch))
	m.Reply = "elsewhere." + strings.Repeat("r", 1000)
	m.Data = []byte(`{"id":1}`)
	testnats.Eventually(t, 10*time.Second, "refusal logged", func() bool {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(logs.String(), streams.LogReplyRefused)
	})
	if out := logs.String(); strings.Contains(out, strings.Repeat("r", 100)) || !strings.Contains(out, "(1010 bytes)") {
		t.Fatalf("reply subject not capped in the log:\n%.500s", out)
	}
}
