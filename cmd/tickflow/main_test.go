package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/embedded"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/system"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

func TestMain(m *testing.M) { testnats.VerifyTestMain(m) }

// result is what one run of the command did.
type result struct {
	code     int
	out, err string
}

// cmd runs the command in this process as a shell would, with an
// environment of its own: no variable of the test process reaches it, and
// HOME is a temporary directory, so no nats context of the machine does.
type cmd struct {
	t   *testing.T
	env map[string]string
}

// with returns a copy of c with more environment variables.
func (c cmd) with(kv ...string) cmd {
	env := map[string]string{}
	for k, v := range c.env {
		env[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		env[kv[i]] = kv[i+1]
	}
	return cmd{t: c.t, env: env}
}

// as speaks as a nats.conf user with its local-default password.
func (c cmd) as(user string) cmd {
	return c.with("NATS_USER", user, "NATS_PASSWORD", testnats.Password(user))
}

func (c cmd) run(args ...string) result { return c.runIn("", args...) }

func (c cmd) runIn(stdin string, args ...string) result {
	c.t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := Run(ctx, args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return c.env[k] }})
	return result{code: code, out: out.String(), err: errb.String()}
}

// ok runs args and fails the test unless they exit 0.
func (c cmd) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != ExitOK {
		c.t.Fatalf("tickflow %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.out, r.err)
	}
	return r.out
}

// expect runs args and fails the test unless they exit with code and
// stderr says want.
func (c cmd) expect(code int, want string, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code || !strings.Contains(r.err, want) {
		c.t.Fatalf("tickflow %s: exit %d, stderr %q; want exit %d saying %q\nstdout:\n%s", strings.Join(args, " "), r.code, r.err, code, want, r.out)
	}
	return r
}

// decode reads a --json output into v.
func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("--json output does not parse as %T: %v\n%s", v, err, out)
	}
	return v
}

// startSystem runs authz (with the repository's authorization table, and
// bob allowed a single send), a worker with the example handlers, and a
// processor and ticker for payments around a nats-server from nats.conf
// listening on a free port, and returns the command with NATS_URL set to
// it.
func startSystem(t *testing.T) cmd {
	t.Helper()
	env := testnats.Start(t, nil, func(eo *embedded.Options, _ *streams.Settings) {
		eo.DontListen, eo.Listen = false, "127.0.0.1:0"
	})
	table, err := os.ReadFile(filepath.Join(filepath.Dir(testnats.ConfigPath(t)), "authz.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tablePath := filepath.Join(t.TempDir(), "authz.yaml")
	table = bytes.Replace(table, []byte("callers:\n"), []byte("callers:\n  bob: {send_rate: 0.001, send_burst: 1}\n"), 1)
	// A schedule that fires once a year, so that it adds no batch to the tests.
	table = append(table, []byte("\nschedules:\n  new-year:\n    cron: \"0 0 1 1 *\"\n    user: alice\n    label: jobs\n    functions: [{type: noop}]\n")...)
	if err := os.WriteFile(tablePath, table, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- system.Run(ctx, system.Options{
			Server: env.Server, Settings: env.Settings, Domains: []string{"payments"},
			TickEvery: 20 * time.Millisecond, TablePath: tablePath, Logger: slog.New(slog.DiscardHandler),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("system: %v", err)
		}
	})
	c := cmd{t: t, env: map[string]string{"NATS_URL": env.Server.URL(), "HOME": t.TempDir()}}
	testnats.Eventually(t, 10*time.Second, "authz answering", func() bool {
		return c.as("alice").run("list").code == ExitOK
	})
	return c
}

// TestTickflow drives the command against a whole running system, as its
// docs use it.
func TestTickflow(t *testing.T) {
	c := startSystem(t)
	alice, owner := c.as("alice"), c.as("owner")

	t.Run("send, wait, batch", func(t *testing.T) {
		alice := alice.with()
		alice.t = t
		sent := decode[api.SendReply](t, alice.ok("--json", "send", "--label", "jobs", "noop", `flaky={"fail_attempts":1}`))
		if sent.ID == 0 || sent.Domain != "payments" || sent.Priority != pipeline.Med || sent.Duplicate {
			t.Fatalf("send: %+v", sent)
		}
		id := strings.TrimSpace(alice.ok("send", "-q", "--label", "jobs", "noop"))
		done := decode[api.BatchReply](t, alice.ok("--json", "wait", id))
		if done.Record.Status != pipeline.Executed || done.Record.Batch.Label != "jobs" {
			t.Fatalf("wait: %+v", done.Record)
		}
		waited := decode[api.BatchReply](t, alice.ok("--json", "wait", jsonField(t, alice.ok("--json", "send", "-l", "jobs", `flaky={"fail_attempts":1}`), "id")))
		if waited.Record.Attempts != 2 {
			t.Fatalf("the flaky batch took %d executions, want 2", waited.Record.Attempts)
		}
		got := decode[api.BatchReply](t, alice.ok("--json", "batch", itoa(sent.ID)))
		if got.Record.Batch.ID != sent.ID || len(got.Record.Batch.Functions) != 2 || got.Record.Batch.Functions[1].Type != "flaky" {
			t.Fatalf("batch: %+v", got.Record.Batch)
		}
		// People get a table with the outcome and each function.
		if out := alice.ok("batch", itoa(sent.ID)); !strings.Contains(out, "STATUS") || !strings.Contains(out, `{"fail_attempts":1}`) {
			t.Fatalf("batch table:\n%s", out)
		}
		// A batch that fails: wait says so with exit 6, after printing it.
		r := alice.expect(ExitBatchFailed, "finished Rejected(handlers: fail on attempt 2)", "send", "--label", "jobs", "fail", "--wait")
		if !strings.Contains(r.out, "DEAD LETTER") {
			t.Fatalf("send --wait printed no record:\n%s", r.out)
		}
		listed := decode[api.ListReply](t, alice.ok("--json", "list", "--limit", "3"))
		if len(listed.Items) != 3 || listed.Items[0].Status != pipeline.Rejected || listed.Next == 0 {
			t.Fatalf("list: %+v", listed)
		}
	})

	t.Run("send from a file or stdin", func(t *testing.T) {
		alice := alice.with()
		alice.t = t
		file := filepath.Join(t.TempDir(), "batch.yaml")
		yamlBatch := "label: jobs\nkey: acct-9\nidempotency_key: order-1\nfunctions:\n  - type: flaky\n    payload: {fail_attempts: 0}\n  - type: noop\n"
		if err := os.WriteFile(file, []byte(yamlBatch), 0o600); err != nil {
			t.Fatal(err)
		}
		first := decode[api.SendReply](t, alice.ok("--json", "send", "-f", file))
		again := decode[api.SendReply](t, alice.ok("--json", "send", "-f", file))
		if again.ID != first.ID || !again.Duplicate {
			t.Fatalf("the same file with its idempotency key sent twice: %+v then %+v", first, again)
		}
		rec := decode[api.BatchReply](t, alice.ok("--json", "wait", itoa(first.ID)))
		if rec.Record.Batch.Key != "acct-9" || rec.Record.IdempotencyKey != "order-1" || len(rec.Record.Batch.Functions) != 2 {
			t.Fatalf("the YAML batch: %+v", rec.Record)
		}
		// JSON on stdin, the label from the flag.
		r := alice.runIn(`{"functions":[{"type":"noop"}],"key":"acct-9"}`, "--json", "send", "-f", "-", "--label", "jobs")
		if r.code != ExitOK {
			t.Fatalf("send -f -: exit %d: %s", r.code, r.err)
		}
		if sent := decode[api.SendReply](t, r.out); sent.ID == 0 {
			t.Fatalf("send from stdin: %s", r.out)
		}
	})

	t.Run("send-many", func(t *testing.T) {
		alice := alice.with()
		alice.t = t
		// Lines 1 and 4 queued, line 3 refused (no such label), a blank
		// line skipped; two requests of two lines at most.
		lines := `{"functions":[{"type":"noop"}],"idempotency_key":"bulk-1"}` + "\n" +
			`{"label":"jobs","functions":[{"type":"noop"}],"key":"acct-7"}` + "\n" +
			`{"label":"nolabel","functions":[{"type":"noop"}]}` + "\n\n" +
			`{"functions":[{"type":"noop"}]}` + "\n"
		r := alice.runIn(lines, "--json", "send-many", "-", "--label", "jobs", "--per-request", "2")
		if r.code != ExitNotFound || !strings.Contains(r.err, `3 of 4 batches queued; the first refused: line 3: 404 authz: unknown label "nolabel"`) || !strings.Contains(r.err, "3 of 4 batches queued") {
			t.Fatalf("send-many: exit %d, stderr %s", r.code, r.err)
		}
		var got []manyResult
		for _, l := range strings.Split(strings.TrimSpace(r.out), "\n") {
			got = append(got, decode[manyResult](t, l))
		}
		if len(got) != 4 || got[0].Line != 1 || got[2].Line != 3 || got[2].Code != 404 || got[3].Line != 5 || got[0].ID == 0 || got[1].ID == 0 || got[3].ID == 0 {
			t.Fatalf("send-many results: %+v", got)
		}
		for _, g := range []uint64{got[0].ID, got[1].ID, got[3].ID} {
			if done := decode[api.BatchReply](t, alice.ok("--json", "wait", itoa(g))); done.Record.Status != pipeline.Executed {
				t.Fatalf("batch %d: %s", g, done.Record.Status)
			}
		}
		// The same first line again: a duplicate, in the table.
		file := filepath.Join(t.TempDir(), "batches.jsonl")
		if err := os.WriteFile(file, []byte(strings.SplitN(lines, "\n", 2)[0]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if out := alice.ok("send-many", file, "-l", "jobs"); !strings.Contains(out, "DUPLICATE") || !strings.Contains(out, itoa(got[0].ID)) || !strings.Contains(out, "yes") {
			t.Fatalf("send-many table:\n%s", out)
		}
		// A bad line sends nothing, and names the line.
		alice.expect(ExitUsage, "stdin: no batches", "send-many", "-", "-l", "jobs")
		r = alice.runIn(`{"functions":[{"type":"noop"}]}`+"\n"+`{"functions":[{"type":"noop"}],"prio":"high"}`, "send-many", "-", "-l", "jobs")
		if r.code != ExitUsage || !strings.Contains(r.err, `stdin:2: unknown field "prio"`) {
			t.Fatalf("send-many with a bad line: exit %d, stderr %s", r.code, r.err)
		}
		alice.expect(ExitUsage, "--per-request 0: expected 1 to 1000", "send-many", "-", "--per-request", "0")
	})

	t.Run("pause, queue, resume", func(t *testing.T) {
		alice, owner := alice.with(), owner.with()
		alice.t, owner.t = t, t
		st := decode[api.StateReply](t, owner.ok("--json", "pause", "payments"))
		if !st.Paused {
			t.Fatalf("pause: %+v", st)
		}
		doms := decode[api.DomainsReply](t, owner.ok("--json", "domains"))
		if !paused(doms, "payments") {
			t.Fatalf("domains after pause: %+v", doms)
		}
		id := jsonField(t, alice.ok("--json", "send", "-l", "jobs", "noop"), "id")
		// Paused, the batch waits: wait gives up after --for with exit 8.
		alice.expect(ExitTimeout, "batch "+id+" has not finished after 200ms", "wait", id, "--for", "200ms")
		q := decode[api.QueueReply](t, owner.ok("--json", "queue", "payments", "med"))
		if !queued(q, id) {
			t.Fatalf("queue of paused payments: %+v, want batch %s", q, id)
		}
		in := decode[api.InFlightReply](t, owner.ok("--json", "inflight", "payments", "--total"))
		if in.Total == nil || *in.Total == 0 {
			t.Fatalf("inflight: %+v", in)
		}
		if out := owner.ok("queue", "payments"); !strings.Contains(out, id) || !strings.Contains(out, "med: ") {
			t.Fatalf("queue table:\n%s", out)
		}
		st = decode[api.StateReply](t, owner.ok("--json", "resume", "payments"))
		if st.Paused {
			t.Fatalf("resume: %+v", st)
		}
		alice.ok("wait", id, "--for", "30s")
	})

	t.Run("send scheduled, batch, cancel", func(t *testing.T) {
		alice := alice.with()
		alice.t = t
		rep := decode[api.SendReply](t, alice.ok("--json", "send", "-l", "jobs", "noop", "--delay", "1h"))
		if rep.RunAt.IsZero() || time.Until(rep.RunAt) < 59*time.Minute {
			t.Fatalf("send --delay 1h: %+v", rep)
		}
		id := strconv.FormatUint(rep.ID, 10)
		if b := decode[api.BatchReply](t, alice.ok("--json", "batch", id)); !b.Scheduled {
			t.Fatalf("batch %s after send --delay: %+v, want scheduled", id, b)
		}
		at := decode[api.SendReply](t, alice.ok("--json", "send", "-l", "jobs", "noop", "--run-at", rep.RunAt.Format(time.RFC3339)))
		if !at.RunAt.Equal(rep.RunAt.Truncate(time.Second)) {
			t.Fatalf("send --run-at %s: %+v", rep.RunAt.Format(time.RFC3339), at)
		}
		out := alice.ok("send", "-l", "jobs", "noop", "--delay", "2h")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || !strings.Contains(lines[0], "RUN AT") || strings.Contains(lines[1], " now ") {
			t.Fatalf("send --delay table:\n%s", out)
		}
		for _, other := range []string{strconv.FormatUint(at.ID, 10), strings.Fields(lines[1])[0]} {
			alice.ok("cancel", other)
		}
		alice.expect(ExitUsage, "run_at or delay, not both", "send", "-l", "jobs", "noop", "--delay", "1h", "--run-at", rep.RunAt.Format(time.RFC3339))
		alice.expect(ExitUsage, "delay", "send", "-l", "jobs", "noop", "--delay", "soon")
		alice.ok("cancel", id)
	})

	t.Run("schedules, pause, resume", func(t *testing.T) {
		alice, owner := alice.with(), owner.with()
		alice.t, owner.t = t, t
		rep := decode[api.SchedulesReply](t, owner.ok("--json", "schedules"))
		if len(rep.Schedules) != 1 || rep.Schedules[0].Name != "new-year" || rep.Schedules[0].Paused || rep.Schedules[0].NextFire == nil {
			t.Fatalf("schedules: %+v", rep)
		}
		if out := owner.ok("schedules", "list"); !strings.Contains(out, "new-year") || !strings.Contains(out, "0 0 1 1 *") {
			t.Fatalf("schedules table:\n%s", out)
		}
		if s := decode[api.ScheduleInfo](t, owner.ok("--json", "schedules", "pause", "new-year")); !s.Paused || s.By != "owner" {
			t.Fatalf("pause: %+v", s)
		}
		if out := owner.ok("schedules"); !strings.Contains(out, "yes") {
			t.Fatalf("schedules after pause:\n%s", out)
		}
		if s := decode[api.ScheduleInfo](t, owner.ok("--json", "schedules", "resume", "new-year")); s.Paused {
			t.Fatalf("resume: %+v", s)
		}
		owner.expect(ExitNotFound, "", "schedules", "pause", "no-such")
		alice.expect(ExitRefused, "", "schedules")
	})

	t.Run("dlq, replay, purge", func(t *testing.T) {
		alice, owner := alice.with(), owner.with()
		alice.t, owner.t = t, t
		id := jsonField(t, alice.ok("--json", "send", "-l", "jobs", "fail"), "id")
		alice.expect(ExitBatchFailed, "finished Rejected", "wait", id)
		dl := decode[api.DLQReply](t, owner.ok("--json", "dlq", "--domain", "payments"))
		var seq uint64
		for _, it := range dl.Items {
			if itoa(it.BatchID) == id {
				seq = it.Seq
			}
		}
		if seq == 0 {
			t.Fatalf("no dead letter of batch %s in %+v", id, dl)
		}
		rep := decode[api.ReplayReply](t, owner.ok("--json", "replay", itoa(seq)))
		if len(rep.Replayed) != 1 || itoa(rep.Replayed[0].From) != id || rep.Replayed[0].AsNew == 0 {
			t.Fatalf("replay: %+v", rep)
		}
		again := decode[api.ReplayReply](t, owner.ok("--json", "replay", itoa(seq)))
		if again.Replayed[0].AsNew != rep.Replayed[0].AsNew {
			t.Fatalf("a second replay of dead letter %d: %+v, want the same batch as %+v", seq, again, rep)
		}
		if out := owner.ok("dlq"); !strings.Contains(out, "REPLAYED AS") || !strings.Contains(out, itoa(rep.Replayed[0].AsNew)) {
			t.Fatalf("dlq table:\n%s", out)
		}
		// Purging asks for a confirmation; without a terminal, --force.
		owner.expect(ExitUsage, "give --force", "purge", itoa(seq))
		purged := decode[api.PurgeReply](t, owner.ok("--json", "purge", itoa(seq), "--force"))
		if purged.Purged != 1 {
			t.Fatalf("purge: %+v", purged)
		}
		owner.expect(ExitNotFound, "no dead letter at sequence", "replay", itoa(seq))
	})

	t.Run("every --json output parses", func(t *testing.T) {
		alice, owner := alice.with(), owner.with()
		alice.t, owner.t = t, t
		id := jsonField(t, alice.ok("--json", "send", "-l", "jobs", "noop", "--key", "acct-json"), "id")
		for _, args := range [][]string{
			{"list"}, {"batch", id}, {"wait", id},
		} {
			decode[map[string]any](t, alice.ok(append([]string{"--json"}, args...)...))
		}
		for _, args := range [][]string{
			{"domains"}, {"queue", "payments", "high"}, {"inflight", "payments"}, {"keys", "payments"},
			{"keys", "payments", "--key", "acct-json"}, {"senders", "payments"}, {"dlq"}, {"reload"},
			{"replay", "--all", "--domain", "payments"}, {"list", "--submitter", "alice"},
		} {
			decode[map[string]any](t, owner.ok(append([]string{"--json"}, args...)...))
		}
		decode[[]map[string]any](t, owner.ok("--json", "queue", "payments"))
		// Paused, a batch stays to be cancelled.
		owner.ok("pause", "payments")
		defer owner.ok("resume", "payments")
		cancelled := decode[api.CancelReply](t, alice.ok("--json", "cancel", jsonField(t, alice.ok("--json", "send", "-l", "jobs", "noop", "--key", "acct-json"), "id")))
		if cancelled.Status != pipeline.RemovedByOwner {
			t.Fatalf("cancel: %+v", cancelled)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		alice, owner := alice.with(), owner.with()
		alice.t, owner.t = t, t
		priority := filepath.Join(t.TempDir(), "priority.json")
		if err := os.WriteFile(priority, []byte(`{"label":"jobs","priority":"high","functions":[{"type":"noop"}]}`), 0o600); err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			name string
			c    cmd
			args []string
			code int
			want string
		}{
			{name: "no label", c: alice, args: []string{"send", "noop"}, code: ExitUsage, want: "no label: give --label"},
			{name: "no functions", c: alice, args: []string{"send", "-l", "jobs"}, code: ExitUsage, want: "no functions"},
			{name: "a payload that is not JSON", c: alice, args: []string{"send", "-l", "jobs", "flaky={fail_attempts:1}"}, code: ExitUsage, want: `function 0 (flaky): payload "{fail_attempts:1}"`},
			{name: "a number that would not come back", c: alice, args: []string{"send", "-l", "jobs", `flaky={"n":1e999}`}, code: ExitUsage, want: "out of range"},
			{name: "a priority in the file", c: alice, args: []string{"send", "-f", priority}, code: ExitUsage, want: "the label decides a batch's priority"},
			{name: "no such file", c: alice, args: []string{"send", "-f", "/nonexistent/batch.yaml"}, code: ExitUsage, want: "read the batch"},
			{name: "--expect past the functions", c: alice, args: []string{"send", "-l", "settlement", "noop", "--expect", "1=block-1"}, code: ExitUsage, want: "has no function 1"},
			{name: "an unknown flag", c: alice, args: []string{"send", "--lable", "jobs", "noop"}, code: ExitUsage, want: "unknown flag --lable"},
			{name: "an unknown command", c: alice, args: []string{"sned"}, code: ExitUsage, want: "unexpected argument sned"},
			{name: "a function type the label does not allow", c: alice, args: []string{"send", "-l", "jobs", "ledger.transfer"}, code: ExitUsage, want: "400"},
			{name: "an unknown label", c: alice, args: []string{"send", "-l", "nolabel", "noop"}, code: ExitNotFound, want: `404 authz: unknown label "nolabel"`},
			{name: "a label the user may not use", c: c.as("oracle"), args: []string{"send", "-l", "transfer", "ledger.transfer"}, code: ExitRefused, want: "403"},
			{name: "a batch that is not there", c: alice, args: []string{"batch", "999999999"}, code: ExitNotFound, want: "404 authz: no batch 999999999"},
			{name: "batch 0", c: alice, args: []string{"wait", "0"}, code: ExitUsage, want: "id is 0"},
			{name: "an owner operation as alice", c: alice, args: []string{"dlq"}, code: ExitRefused, want: "403 authz: only the owner"},
			{name: "a limit out of range", c: alice, args: []string{"list", "--limit", "9999"}, code: ExitUsage, want: "limit is 9999"},
			{name: "an unknown status", c: alice, args: []string{"list", "--status", "Done"}, code: ExitUsage, want: `--status "Done": expected one of`},
			{name: "a bad priority", c: owner, args: []string{"queue", "payments", "low"}, code: ExitUsage, want: `priority "low": expected high or med`},
			{name: "replay naming nothing", c: owner, args: []string{"replay"}, code: ExitUsage, want: "name a dead letter's sequence, or --all"},
			{name: "--for without --wait", c: alice, args: []string{"send", "-l", "jobs", "noop", "--for", "1s"}, code: ExitUsage, want: "give --wait too"},
			{name: "a wrong password", c: c.with("NATS_USER", "alice", "NATS_PASSWORD", "nope"), args: []string{"list"}, code: ExitConnection, want: "authorization refused"},
			{name: "no server there", c: alice.with("NATS_URL", "nats://127.0.0.1:1"), args: []string{"list"}, code: ExitConnection, want: "connect to nats://127.0.0.1:1 as alice (server from NATS_URL, user from NATS_USER, password from NATS_PASSWORD)"},
			{name: "no user", c: c, args: []string{"list"}, code: ExitConnection, want: "no tickflow user"},
			{name: "speaking as another user", c: alice.with("TICKFLOW_AS", "bob"), args: []string{"list"}, code: ExitConnection, want: `speaking as "bob" (TICKFLOW_AS) over a connection made as user "alice"`},
			{name: "an unknown context", c: alice.with("NATS_CONTEXT", "nowhere"), args: []string{"list"}, code: ExitConnection, want: `unknown nats context "nowhere"`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				tt.c.t = t
				tt.c.expect(tt.code, tt.want, tt.args...)
			})
		}
	})

	t.Run("nats contexts", func(t *testing.T) {
		url := c.env["NATS_URL"]
		xdg := t.TempDir()
		writeContext(t, xdg, "local", `{"description":"alice on the test server","url":"`+url+`","user":"alice","password":"local-alice","inbox_prefix":"_INBOX_alice"}`)
		writeContext(t, xdg, "boss", `{"url":"`+url+`","user":"owner","password":"env://OWNER_PW"}`)
		writeContext(t, xdg, "token", `{"url":"`+url+`","token":"s3cret"}`)
		writeContext(t, xdg, "inbox", `{"url":"`+url+`","user":"alice","password":"local-alice","inbox_prefix":"_INBOX"}`)
		select_ := func(name string) {
			if err := os.WriteFile(filepath.Join(xdg, "nats", "context.txt"), []byte(name+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		select_("local")
		// Nothing but the context: its server, user and password.
		x := cmd{t: t, env: map[string]string{"XDG_CONFIG_HOME": xdg, "HOME": t.TempDir(), "OWNER_PW": "local-owner"}}
		submitter := func(x cmd) string {
			t.Helper()
			id := jsonField(t, x.ok("--json", "send", "-l", "jobs", "noop"), "id")
			return decode[api.BatchReply](t, c.as("owner").ok("--json", "batch", id)).Record.Batch.Submitter
		}
		if got := submitter(x); got != "alice" {
			t.Fatalf("with the selected context alice's batch was submitted by %q", got)
		}
		// The environment wins over the context, a flag over the environment.
		oracle := x.with("NATS_USER", "oracle", "NATS_PASSWORD", "local-oracle")
		if got := submitter(oracle); got != "oracle" {
			t.Fatalf("NATS_USER oracle over the context: submitted by %q", got)
		}
		if got := submitter(oracle.with("NATS_USER", "", "NATS_PASSWORD", "")); got != "alice" {
			t.Fatalf("empty variables count as unset: submitted by %q", got)
		}
		oracle.ok("--user", "owner", "--password", "local-owner", "domains")
		// --context and NATS_CONTEXT name another; a password may be env://.
		x.ok("--context", "boss", "domains")
		x.with("NATS_CONTEXT", "boss").ok("domains")
		x.expect(ExitRefused, "403", "domains")
		// A path to a context file, as the nats tool takes it.
		x.ok("--context", filepath.Join(xdg, "nats", "context", "boss.json"), "domains")
		// HOME/.config when XDG_CONFIG_HOME is not set.
		home := t.TempDir()
		writeContext(t, filepath.Join(home, ".config"), "boss", `{"url":"`+url+`","user":"owner","password":"local-owner"}`)
		cmd{t: t, env: map[string]string{"HOME": home, "NATS_CONTEXT": "boss"}}.ok("domains")
		// Contexts that cannot work say why.
		x.expect(ExitConnection, `nats context "token"`, "--context", "token", "list")
		x.expect(ExitConnection, "sets token, which tickflow does not connect with", "--context", "token", "list")
		// The inbox prefix is always the user's own, whatever a context says.
		x.ok("--context", "inbox", "list")
		x.with("OWNER_PW", "").expect(ExitConnection, "the password names the environment variable OWNER_PW", "--context", "boss", "domains")
		select_("gone")
		x.expect(ExitConnection, `unknown nats context "gone" (selected in `+filepath.Join(xdg, "nats", "context.txt"), "list")
	})

	t.Run("too many requests", func(t *testing.T) {
		bob := c.as("bob")
		bob.t = t
		bob.ok("send", "-l", "jobs", "noop")
		bob.expect(ExitTooMany, "429 authz: bob sends more than", "send", "-l", "jobs", "noop")
	})

	t.Run("help", func(t *testing.T) {
		alice := alice.with()
		alice.t = t
		if out := alice.ok("--help"); !strings.Contains(out, "Exit codes") || !strings.Contains(out, "Owner commands") {
			t.Fatalf("--help:\n%s", out)
		}
		if out := alice.ok("send", "--help"); !strings.Contains(out, "--idempotency-key") {
			t.Fatalf("send --help:\n%s", out)
		}
	})
}

// writeContext writes a nats context file under the config root root.
func writeContext(t *testing.T, root, name, body string) {
	t.Helper()
	dir := filepath.Join(root, "nats", "context")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func jsonField(t *testing.T, out, field string) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	return string(m[field])
}

func itoa(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func paused(d api.DomainsReply, domain string) bool {
	for _, x := range d.Domains {
		if x.Domain == domain {
			return x.Paused
		}
	}
	return false
}

func queued(q api.QueueReply, id string) bool {
	for _, it := range q.Items {
		if itoa(it.ID) == id {
			return true
		}
	}
	return false
}
