package authz_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

func TestParseTableRejects(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{name: "no labels", yaml: "labels: {}", want: "no labels"},
		{name: "unknown key", yaml: "labels:\n  x:\n    domain: d\n    colour: red", want: "colour"},
		{name: "bad domain", yaml: "labels:\n  x: {domain: a.b, users: ['*'], mode: atomic, priority: high, functions: {noop: {}}}", want: "labels.x.domain"},
		{name: "no users", yaml: "labels:\n  x: {domain: d, mode: atomic, priority: high, functions: {noop: {}}}", want: "labels.x.users"},
		{name: "bad mode", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: sometimes, priority: high, functions: {noop: {}}}", want: "labels.x.mode"},
		{name: "retry on non-atomic label", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: non_atomic, priority: med, retry: {times: 1, backoff: {kind: fixed, initial: 1s}}, functions: {noop: {}}}", want: "labels.x.retry"},
		{name: "bad multiplier", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, retry: {times: 1, backoff: {kind: exponential, initial: 1s, multiplier: 1}}, functions: {noop: {}}}", want: "multiplier"},
		{name: "confirm in atomic", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {noop: {confirm: {timeout: 1s}}}}", want: "confirm"},
		{name: "inclusion in atomic", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {tx: {inclusion: {max_wait: 1s}}}}", want: "functions.tx.inclusion"},
		{name: "inclusion without max wait", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: non_atomic, priority: high, functions: {tx: {inclusion: {poll_every: 1s}}}}", want: "max_wait"},
		{name: "inclusion and confirm", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: non_atomic, priority: high, functions: {tx: {confirm: {timeout: 1s}, inclusion: {max_wait: 1s}}}}", want: "together with confirm"},
		{name: "no functions", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high}", want: "labels.x.functions"},
		{name: "negative max_functions", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: non_atomic, priority: high, max_functions: -1, functions: {tx: {sender: true}}}", want: "labels.x.max_functions: must be between 1 and 1000"},
		{name: "max_functions over the batch bound", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: non_atomic, priority: high, max_functions: 1001, functions: {tx: {sender: true}}}", want: "labels.x.max_functions"},
		{name: "negative per-submitter bound", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, max_per_submitter: -1, functions: {noop: {}}}", want: "labels.x.max_per_submitter"},
		{name: "caller not a user name", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {noop: {}}}\ncallers:\n  a.b: {max_requests: 1}", want: "callers.a.b"},
		{name: "no requests at all", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {noop: {}}}\ncallers:\n  alice: {max_requests: 0}", want: "callers.alice.max_requests: must be at least 1"},
		{name: "negative send rate", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {noop: {}}}\ncallers:\n  '*': {send_rate: -1}", want: "callers.*.send_rate"},
		{name: "burst without a rate", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {noop: {}}}\ncallers:\n  alice: {send_burst: 5}", want: "callers.alice.send_burst: applies only with a send_rate"},
		{name: "unknown caller field", yaml: "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {noop: {}}}\ncallers:\n  alice: {max_rps: 5}", want: "max_rps"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := authz.ParseTable([]byte(tt.yaml))
			if !errors.Is(err, authz.ErrTable) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want ErrTable mentioning %q", err, tt.want)
			}
		})
	}
}

// TestReload: the owner's reload picks up a changed table; a table that
// does not validate is refused and the old one stays.
func TestReload(t *testing.T) {
	b, svc, path := authzFromFile(t, tableYAML)
	admin := b.env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "authz up", func() bool {
		_, err := admin.Request("$SRV.PING.authz", nil, 100*time.Millisecond)
		return err == nil
	})
	if e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: "extra", Functions: []api.CallSpec{noop()}}, nil); e == nil || e.Code != "404" {
		t.Fatalf("before reload: %+v", e)
	}
	extra := tableYAML + "  extra:\n    domain: pay\n    users: [alice]\n    mode: atomic\n    priority: med\n    functions: {noop: {}}\n"
	if err := os.WriteFile(path, []byte(extra), 0o600); err != nil {
		t.Fatal(err)
	}
	var rep api.ReloadReply
	if e := b.call(t, "owner", api.OpReload, nil, &rep); e != nil || rep.Labels != 5 {
		t.Fatalf("reload: %+v %+v", e, rep)
	}
	var sent api.SendReply
	if e := b.call(t, "alice", api.OpSend, api.SendRequest{Label: "extra", Functions: []api.CallSpec{noop()}}, &sent); e != nil || sent.Priority != pipeline.Med {
		t.Fatalf("after reload: %+v %+v", e, sent)
	}
	if err := os.WriteFile(path, []byte("labels: {}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if e := b.call(t, "owner", api.OpReload, nil, nil); e == nil || e.Code != "400" {
		t.Fatalf("reload of a bad table: %+v", e)
	}
	if e := b.call(t, "alice", api.OpReload, nil, nil); e == nil || e.Code != "403" {
		t.Fatalf("reload by a caller: %+v", e)
	}
	if len(svc.Table().Labels) != 5 {
		t.Fatal("a bad table replaced the good one")
	}
}

// TestTableLoadsEveryDocumentedKey: every key docs/api.md lists for the
// authorization table loads under that name, retry logic included.
func TestTableLoadsEveryDocumentedKey(t *testing.T) {
	const doc = `
labels:
  atomic:
    domain: pay
    users: [alice, "*"]
    mode: atomic
    priority: high
    retry:
      times: 3
      backoff: {kind: exponential, initial: 100ms, multiplier: 2, max: 1s}
      jitter: 10ms
      non_retryable: [insufficient_funds]
      retry_on: [timeout, unavailable]
    functions: {ledger.transfer: {}}
    expiry: 1h
    max_concurrent: 4
    max_per_submitter: 2
  stepwise:
    domain: pay
    users: [bob]
    mode: non_atomic
    priority: med
    max_functions: 20
    functions:
      http.post:
        retry: {times: indefinitely, backoff: {kind: linear, initial: 1s, increment: 500ms}}
        confirm: {timeout: 1m, by: [oracle]}
      chain.dispatch:
        sender: true
        inclusion: {poll_every: 2s, max_wait: 1m, by: [oracle]}
callers:
  "*": {max_requests: 8, send_rate: 2.5}
  alice: {max_requests: 3, send_rate: 10, send_burst: 20}
`
	tbl, err := authz.ParseTable([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	a, s := tbl.Labels["atomic"], tbl.Labels["stepwise"]
	r := a.Retry
	if a.Domain != "pay" || len(a.Users) != 2 || a.Mode != pipeline.Atomic || a.Priority != pipeline.High ||
		a.Expiry.D() != time.Hour || a.MaxConcurrent != 4 || a.MaxPerSubmitter != 2 || r == nil {
		t.Fatalf("label %+v", a)
	}
	if c := tbl.Callers["alice"]; c == nil || *c.MaxRequests != 3 || *c.SendRate != 10 || *c.SendBurst != 20 {
		t.Fatalf("caller alice %+v", c)
	}
	if c := tbl.Callers["*"]; c == nil || *c.MaxRequests != 8 || *c.SendRate != 2.5 || c.SendBurst != nil {
		t.Fatalf("caller * %+v", c)
	}
	if r.Times != 3 || r.Backoff.Kind != pipeline.Exponential || r.Backoff.Initial.D() != 100*time.Millisecond ||
		r.Backoff.Multiplier != 2 || r.Backoff.Max.D() != time.Second || r.Jitter.D() != 10*time.Millisecond ||
		!slices.Equal(r.NonRetryable, []string{"insufficient_funds"}) || !slices.Equal(r.RetryOn, []string{"timeout", "unavailable"}) {
		t.Fatalf("retry %+v", r)
	}
	f := s.Functions["http.post"]
	if f.Retry == nil || f.Retry.Times != pipeline.Forever || f.Retry.Backoff.Kind != pipeline.Linear || f.Retry.Backoff.Increment.D() != 500*time.Millisecond ||
		f.Confirm == nil || f.Confirm.Timeout.D() != time.Minute || !slices.Equal(f.Confirm.By, []string{"oracle"}) {
		t.Fatalf("function rule %+v", f)
	}
	if s.MaxFunctions != 20 {
		t.Fatalf("max_functions %d, want 20", s.MaxFunctions)
	}
	if d := s.Functions["chain.dispatch"]; !d.Sender || d.Inclusion == nil || d.Inclusion.PollEvery.D() != 2*time.Second ||
		d.Inclusion.MaxWait.D() != time.Minute || !slices.Equal(d.Inclusion.By, []string{"oracle"}) {
		t.Fatalf("dispatch rule %+v", d)
	}
	// The Go field names are not keys.
	for _, bad := range []string{"nonretryable: [x]", "retryon: [x]"} {
		y := "labels:\n  x: {domain: d, users: ['*'], mode: atomic, priority: high, functions: {noop: {}}, retry: {times: 1, backoff: {kind: fixed, initial: 1s}, " + bad + "}}"
		if _, err := authz.ParseTable([]byte(y)); !errors.Is(err, authz.ErrTable) {
			t.Errorf("%s: %v, want ErrTable", bad, err)
		}
	}
}

// authzFromFile runs authz on a server of its own from a table file that
// holds yaml, for a test that rewrites the file and reloads it; the
// bundle has only the server and authz's context.
func authzFromFile(t *testing.T, yaml string) (*bundle, *authz.Service, string) {
	t.Helper()
	env := testnats.Start(t, []string{domain})
	path := filepath.Join(t.TempDir(), "authz.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	svc, err := authz.New(context.Background(), env.Conn(t, "authz"), authz.Options{TablePath: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); testnats.Stopped(t, "authz", done) })
	return &bundle{env: env, ctx: ctx}, svc, path
}
