package permtest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/system"
	"github.com/tickflow/tickflow/internal/testnats"
)

// servedSubject is one row of the confused-deputy table: a subject a
// service subscribes to, and why a reply aimed at a stream or bucket must
// never be answered there. Every subscription the running system holds
// outside its own inboxes must match a row: a new one without a row fails
// TestNoServiceWritesWhereACallerPoints.
type servedSubject struct {
	// server is the nats.conf user whose connection subscribes.
	server string
	// pattern matches the subscribed subject; "<id>" stands for one token
	// (a micro service instance id), a final "<rest>" for one or more (a
	// function type).
	pattern string
	why     string
}

var servedSubjects = []servedSubject{
	{"processor", "tick.payments", "anyone may tick, with any reply subject"},
	{"processor", "tick.reports", "anyone may tick, with any reply subject"},
	{"authz", "authz.*.<id>", "every caller's operations (send, batch, queue, …)"},
	{"authz", "$SRV.<id>", "micro discovery: PING, INFO, STATS"},
	{"authz", "$SRV.<id>.authz", "micro discovery of authz"},
	{"authz", "$SRV.<id>.authz.<id>", "micro discovery of one authz instance"},
	{"worker", "work.unit", "atomic units"},
	{"worker", "work.units", "several atomic units in one request"},
	{"worker", "work.fn.<rest>", "function calls by type"},
	{"worker", "work.fallback.<rest>", "fallbacks by type"},
	{"worker", "work.poll.<rest>", "inclusion polls by type"},
	{"worker", "work.hook.<rest>", "inclusion success and failure hooks by type"},
	{"worker", "$SRV.<id>", "micro discovery"},
	{"worker", "$SRV.<id>.worker", "micro discovery of workers"},
	{"worker", "$SRV.<id>.worker.<id>", "micro discovery of one worker"},
}

func (r servedSubject) matches(server, subject string) bool {
	if server != r.server {
		return false
	}
	want, got := strings.Split(r.pattern, "."), strings.Split(subject, ".")
	for i := range want {
		switch {
		case want[i] == "<rest>":
			return len(got) > i
		case i >= len(got):
			return false
		case want[i] != "<id>" && want[i] != got[i]:
			return false
		}
	}
	return len(want) == len(got)
}

// refusals counts the services' "reply refused" log records.
type refusals struct {
	slog.Handler
	ch chan string
}

func (h refusals) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == streams.LogReplyRefused {
		h.ch <- r.Message
	}
	return nil
}

func (h refusals) Enabled(context.Context, slog.Level) bool { return true }
func (h refusals) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h refusals) WithGroup(string) slog.Handler            { return h }

// TestNoServiceWritesWhereACallerPoints runs the whole system (authz, a
// worker, a processor per domain, the ticker) on the real nats.conf, finds
// every subject a service subscribes to, and for each one, as every role but
// admin (who holds every right already), sends requests whose reply subject
// is each subject the serving role may publish to. Each request is either
// denied by the server or refused by the service, and no stream, bucket or
// consumer changes.
func TestNoServiceWritesWhereACallerPoints(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole system")
	}
	s := start(t)
	refused := make(chan string, 1<<16)
	serving := make(chan string, 16)
	log := slog.New(&tee{refusals{ch: refused}, serving})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- system.Run(ctx, system.Options{
			Server: s.env.Server, Settings: s.env.Settings, Domains: []string{"payments", "reports"},
			TickEvery: time.Hour, TablePath: filepath.Join(filepath.Dir(testnats.ConfigPath(t)), "authz.yaml"),
			Logger: log,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("system: %v", err)
		}
	})
	// authz, the worker and two processors say they serve once subscribed.
	for range 4 {
		select {
		case <-serving:
		case err := <-done:
			t.Fatalf("system stopped: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the system did not start serving")
		}
	}

	// A batch waiting in its queue: a tick that ran would move it.
	alice := s.as(t, "alice")
	if _, err := alice.nc.Request(streams.AuthzSubject("alice", api.OpSend),
		[]byte(`{"label":"jobs","functions":[{"type":"noop"}]}`), 5*time.Second); err != nil {
		t.Fatalf("alice send: %v", err)
	}

	subs := subscriptions(t, s.env.Server.Server)
	for _, sub := range subs {
		if !slices.ContainsFunc(servedSubjects, func(r servedSubject) bool { return r.matches(sub.user, sub.subject) }) {
			t.Errorf("%s subscribes to %q, which has no row in servedSubjects: add one, and make the service answer only into inboxes", sub.user, sub.subject)
		}
	}
	writable := writableSubjects(t)
	attackers := map[string]*role{}
	for _, user := range roles {
		if user != "admin" {
			attackers[user] = s.as(t, user)
		}
	}
	attackers["anyone"] = s.anonymous(t)

	before := s.snapshot(t)
	probes := 0
	for _, sub := range subs {
		for _, user := range slices.Sorted(maps.Keys(attackers)) {
			r := attackers[user]
			subject := instantiate(sub.subject, user)
			for _, reply := range writable[sub.user] {
				if err := r.nc.PublishMsg(&nats.Msg{Subject: subject, Reply: reply, Data: []byte("{}")}); err != nil {
					t.Fatal(err)
				}
				probes++
				if s.deniedOrRefused(t, r, subject, reply, refused) == subjectDenied {
					break // this role may not publish here at all
				}
			}
		}
	}
	after := s.snapshot(t)
	if before != after {
		t.Errorf("streams changed after %d probes:\nbefore:\n%s\nafter:\n%s", probes, before, after)
	}
	t.Logf("%d subscriptions, %d probes", len(subs), probes)
}

// tee passes records to next and reports "... serving" records on serving.
type tee struct {
	next    refusals
	serving chan string
}

func (h *tee) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasSuffix(r.Message, " serving") {
		h.serving <- r.Message
	}
	return h.next.Handle(ctx, r)
}

func (h *tee) Enabled(context.Context, slog.Level) bool { return true }
func (h *tee) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *tee) WithGroup(string) slog.Handler            { return h }

// What became of one probe.
const (
	// subjectDenied: the server refused the role's publish to the subject.
	subjectDenied = iota
	// replyDenied: the server refused the reply subject (a reserved one,
	// such as a JetStream acknowledgement, the role may not name).
	replyDenied
	// serviceRefused: the service received it and refused to answer.
	serviceRefused
)

// deniedOrRefused waits until the server denies r's publish to subject or
// a service logs its refusal of the reply, and says which happened.
func (s *suite) deniedOrRefused(t *testing.T, r *role, subject, reply string, refused <-chan string) int {
	t.Helper()
	timer := time.NewTimer(5 * time.Second)
	defer timer.Stop()
	for {
		select {
		case v := <-r.violations:
			switch {
			case strings.Contains(v, pubViolation(subject)):
				r.env.ExpectViolation(r.user, pubViolation(subject))
				return subjectDenied
			case strings.Contains(v, fmt.Sprintf("Publish with Reply of %q", reply)):
				r.env.ExpectViolation(r.user, fmt.Sprintf("Permissions Violation for Publish with Reply of %q", reply))
				return replyDenied
			}
			t.Fatalf("%s: unexpected %q", r.user, v)
		case <-refused:
			return serviceRefused
		case <-timer.C:
			t.Fatalf("%s published to %s with reply %s: neither denied by the server nor refused by the service", r.user, subject, reply)
		}
	}
}

// anonymous connects without credentials, as nats.conf's "anyone".
func (s *suite) anonymous(t *testing.T) *role {
	t.Helper()
	r := &role{env: s.env, user: "anyone", violations: make(chan string, 64)}
	nc, err := streams.Connect(streams.Credentials{Name: "anonymous"}, s.env.Server.InProcess(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				r.violations <- err.Error()
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	r.nc = nc
	return r
}

type subscription struct{ user, subject string }

// subscriptions lists the subjects the services' connections subscribe to,
// outside their own inboxes.
func subscriptions(t *testing.T, srv *server.Server) []subscription {
	t.Helper()
	cz, err := srv.Connz(&server.ConnzOptions{Subscriptions: true, SubscriptionsDetail: true, Username: true, Limit: 1 << 12})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[subscription]bool{}
	for _, c := range cz.Conns {
		if c.AuthorizedUser == "admin" || strings.HasPrefix(c.Name, "test-") || c.Name == "anonymous" {
			continue // the test's own connections
		}
		for _, sd := range c.SubsDetail {
			if strings.HasPrefix(sd.Subject, streams.InboxPrefix(c.AuthorizedUser)+".") {
				continue
			}
			seen[subscription{c.AuthorizedUser, sd.Subject}] = true
		}
	}
	out := slices.Collect(maps.Keys(seen))
	sort.Slice(out, func(i, j int) bool { return out[i].user+out[i].subject < out[j].user+out[j].subject })
	if len(out) == 0 {
		t.Fatal("no service subscriptions found")
	}
	return out
}

// instantiate turns a subscribed subject into one a role publishes to: a
// "*" becomes the role's name (authz.<user>.<op>), a ">" one token.
func instantiate(subject, user string) string {
	parts := strings.Split(subject, ".")
	for i, p := range parts {
		switch p {
		case "*":
			parts[i] = user
		case ">":
			parts[i] = "x"
		}
	}
	return strings.Join(parts, ".")
}

// writableSubjects lists, per nats.conf user, one literal subject for every
// publish grant that is not an inbox: every stream, bucket and API subject
// the user could write.
func writableSubjects(t *testing.T) map[string][]string {
	t.Helper()
	opts, err := server.ProcessConfigFile(testnats.ConfigPath(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, u := range opts.Users {
		if u.Permissions == nil || u.Permissions.Publish == nil {
			continue
		}
		var deny []string
		deny = append(deny, u.Permissions.Publish.Deny...)
		for _, grant := range u.Permissions.Publish.Allow {
			for _, lit := range literals(grant) {
				if streams.IsInbox(lit) || slices.ContainsFunc(deny, func(d string) bool { return subjectMatches(d, lit) }) {
					continue
				}
				out[u.Username] = append(out[u.Username], lit)
			}
		}
	}
	for _, user := range []string{"authz", "processor", "worker"} {
		if len(out[user]) == 0 {
			t.Fatalf("nats.conf grants %s no publish subjects", user)
		}
	}
	return out
}

// literals turns a grant into literal subjects it covers: wildcards become
// a domain, a key or an id, so that a write would land on a real stream.
func literals(grant string) []string {
	if !strings.ContainsAny(grant, "*>") {
		return []string{grant}
	}
	var out []string
	for _, fill := range []struct{ star, tail string }{{"payments", "payments.1"}, {"1", "1"}} {
		parts := strings.Split(grant, ".")
		for i, p := range parts {
			switch p {
			case "*":
				parts[i] = fill.star
			case ">":
				parts[i] = fill.tail
			}
		}
		out = append(out, strings.Join(parts, "."))
	}
	return slices.Compact(out)
}

// subjectMatches reports whether literal subject s matches pattern p.
func subjectMatches(p, s string) bool {
	pt, st := strings.Split(p, "."), strings.Split(s, ".")
	for i, tok := range pt {
		if tok == ">" {
			return len(st) > i
		}
		if i >= len(st) || (tok != "*" && tok != st[i]) {
			return false
		}
	}
	return len(pt) == len(st)
}

// snapshot describes every stream's and consumer's state, as admin sees it.
func (s *suite) snapshot(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var b strings.Builder
	names := s.admin.StreamNames(ctx)
	var all []string
	for n := range names.Name() {
		all = append(all, n)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(all)
	for _, name := range all {
		st, err := s.admin.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s msgs=%d first=%d last=%d deleted=%d\n", name, info.State.Msgs, info.State.FirstSeq, info.State.LastSeq, info.State.NumDeleted)
		cl := st.ListConsumers(ctx)
		var cs []string
		for ci := range cl.Info() {
			if ci.Config.Durable == "" {
				continue // a reader's ordered consumer, not state
			}
			cs = append(cs, fmt.Sprintf("  %s delivered=%d ackfloor=%d pending=%d ackpending=%d redelivered=%d\n",
				ci.Name, ci.Delivered.Stream, ci.AckFloor.Stream, ci.NumPending, ci.NumAckPending, ci.NumRedelivered))
		}
		if err := cl.Err(); err != nil {
			t.Fatal(err)
		}
		sort.Strings(cs)
		for _, c := range cs {
			b.WriteString(c)
		}
	}
	return b.String()
}
