package authz

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
)

const fairTable = `
labels:
  jobs:
    domain: pay
    users: ["*"]
    mode: non_atomic
    priority: med
    functions:
      noop: {}
`

// runHeld runs an authz replica whose requests from alice are held until
// release is closed, and returns a channel that receives once per held
// request as it starts.
func runHeld(t *testing.T, tableYAML string, release <-chan struct{}) (*testnats.Env, <-chan struct{}) {
	t.Helper()
	env := testnats.Start(t, []string{"pay"})
	table, err := ParseTable([]byte(tableYAML))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, env.Conn(t, "authz"), Options{Table: table})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	held := make(chan struct{}, 1024)
	s.holdRequest = func(user, _ string) {
		if user == "alice" {
			held <- struct{}{}
			<-release
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); testnats.Stopped(t, "authz", done) })
	admin := env.Conn(t, "admin")
	testnats.Eventually(t, 5*time.Second, "authz up", func() bool {
		_, err := admin.Request("$SRV.PING.authz", nil, 100*time.Millisecond)
		return err == nil
	})
	return env, held
}

// TestOneCallerCannotStallTheOthers: alice's requests, however many and
// however slow (held here until the test lets them go), take at most her
// share of the workers; the ones over it are refused at once with 429
// naming the bound, and bob's sends are answered meanwhile. Before, her
// requests took every worker and bob's sends were never answered.
func TestOneCallerCannotStallTheOthers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table string
		limit int
	}{
		{name: "default share", table: fairTable, limit: defaultMaxRequests(DefaultConcurrency)},
		{name: "the table's bound for alice", table: fairTable + "callers:\n  alice: {max_requests: 3}\n  \"*\": {max_requests: 40}\n", limit: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var once sync.Once
			letGo := func() { once.Do(func() { close(release) }) }
			env, held := runHeld(t, tc.table, release)
			t.Cleanup(letGo) // before authz stops, which waits for them

			const n = DefaultConcurrency // as many as there are workers
			alice := env.Conn(t, "alice")
			answers := make(chan *nats.Msg, n)
			inbox := alice.NewInbox()
			sub, err := alice.Subscribe(inbox+".*", func(m *nats.Msg) { answers <- m })
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
			for i := range n {
				if err := alice.PublishRequest(streams.AuthzSubject("alice", api.OpList), fmt.Sprintf("%s.%d", inbox, i), []byte(`{"limit":10}`)); err != nil {
					t.Fatal(err)
				}
			}
			if err := alice.Flush(); err != nil {
				t.Fatal(err)
			}
			want := fmt.Sprintf("authz: too many requests in flight for alice (limit %d); try again", tc.limit)
			for range n - tc.limit {
				m, ok := recv(answers, 10*time.Second)
				if !ok {
					t.Fatalf("alice's requests over her share were not refused")
				}
				if code, msg := m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader); code != "429" || msg != want {
					t.Fatalf("a request over alice's share answered %q %q (%s), want 429 %q", code, msg, m.Data, want)
				}
			}
			for range tc.limit {
				if _, ok := recv(held, 10*time.Second); !ok {
					t.Fatalf("fewer than %d of alice's requests reached a worker", tc.limit)
				}
			}

			// With every one of alice's requests held, bob is served.
			bob := env.Conn(t, "bob")
			for i := range 5 {
				m, err := bob.Request(streams.AuthzSubject("bob", api.OpSend), []byte(`{"label":"jobs","functions":[{"type":"noop"}]}`), 10*time.Second)
				if err != nil {
					t.Fatalf("bob's send %d while alice's requests are held: %v", i, err)
				}
				var rep api.SendReply
				if code := m.Header.Get(micro.ErrorCodeHeader); code != "" || json.Unmarshal(m.Data, &rep) != nil || rep.ID == 0 {
					t.Fatalf("bob's send %d answered %q %q %s", i, code, m.Header.Get(micro.ErrorHeader), m.Data)
				}
			}

			letGo()
			for range tc.limit {
				m, ok := recv(answers, 10*time.Second)
				if !ok {
					t.Fatal("alice's held requests were not answered once let go")
				}
				if code := m.Header.Get(micro.ErrorCodeHeader); code != "" {
					t.Fatalf("a held request of alice's answered %s %s", code, m.Header.Get(micro.ErrorHeader))
				}
			}
			if m, ok := recv(answers, 0); ok {
				t.Fatalf("alice got more answers than requests: %s", m.Data)
			}
		})
	}
}

// TestFairPoolTakesCallersInTurn: a free worker takes the next request of
// the next caller in turn, so bob's requests wait behind one of alice's
// each, not behind all she queued before them.
func TestFairPoolTakesCallersInTurn(t *testing.T) {
	p := startFairPool(1, 1)
	defer p.stop()
	var mu sync.Mutex
	var order []string
	started, unblock := make(chan struct{}), make(chan struct{})
	run := func(name string) func(func()) {
		return func(func()) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}
	}
	if !p.add("alice", 10, func(release func()) { run("a1")(release); close(started); <-unblock }) {
		t.Fatal("a1 refused")
	}
	<-started
	for _, a := range []string{"a2", "a3", "a4"} {
		if !p.add("alice", 10, run(a)) {
			t.Fatalf("%s refused", a)
		}
	}
	for _, b := range []string{"b1", "b2"} {
		if !p.add("bob", 10, run(b)) {
			t.Fatalf("%s refused", b)
		}
	}
	close(unblock)
	testnats.Eventually(t, 5*time.Second, "every request run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 6
	})
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(order, " "); got != "a1 b1 a2 b2 a3 a4" {
		t.Fatalf("ran %s, want a1 b1 a2 b2 a3 a4", got)
	}
}

// TestFairPoolLimits: a caller holding its limit of requests (running or
// waiting) is refused the next at once, and others are not; one caller
// never runs on more workers than its share, even with workers free.
func TestFairPoolLimits(t *testing.T) {
	p := startFairPool(4, 2)
	defer p.stop()
	unblock := make(chan struct{})
	running := make(chan string, 8)
	job := func(name string) func(func()) { return func(func()) { running <- name; <-unblock } }
	for i := range 3 {
		if !p.add("alice", 3, job("alice")) {
			t.Fatalf("alice's request %d refused under her limit", i)
		}
	}
	if p.add("alice", 3, job("alice")) {
		t.Fatal("alice's fourth request accepted over her limit of 3")
	}
	if !p.add("bob", 3, job("bob")) {
		t.Fatal("bob refused while alice is at her limit")
	}
	got := map[string]int{}
	for range 3 { // alice's share of 2, and bob's
		name, ok := recv(running, 5*time.Second)
		if !ok {
			t.Fatalf("only %v started", got)
		}
		got[name]++
	}
	if _, ok := recv(running, 50*time.Millisecond); ok || got["alice"] != 2 || got["bob"] != 1 {
		t.Fatalf("running %v (and more: %v), want alice on her share of 2 workers and bob on one", got, ok)
	}
	close(unblock)
}

// TestFairPoolReleaseBeforeTheWorkerEnds: a request that released its
// place (as serve does just before it answers) no longer counts against
// its caller's limit, although its worker has not finished: a caller that
// sends its next request as soon as it has an answer is not refused.
func TestFairPoolReleaseBeforeTheWorkerEnds(t *testing.T) {
	p := startFairPool(2, 2)
	defer p.stop()
	answered, unblock := make(chan struct{}), make(chan struct{})
	if !p.add("alice", 1, func(release func()) { release(); close(answered); <-unblock }) {
		t.Fatal("alice's first request refused")
	}
	<-answered
	ran := make(chan struct{})
	if !p.add("alice", 1, func(func()) { close(ran) }) {
		t.Fatal("alice's next request refused although her first had answered")
	}
	if _, ok := recv(ran, 5*time.Second); !ok {
		t.Fatal("alice's next request did not run")
	}
	if p.add("alice", 1, func(func()) { <-unblock }) != true {
		t.Fatal("alice refused with nothing held")
	}
	if p.add("alice", 1, func(func()) {}) {
		t.Fatal("alice's request accepted over her limit of 1")
	}
	close(unblock)
}

// recv receives from ch, waiting at most d.
func recv[T any](ch <-chan T, d time.Duration) (T, bool) { return testnats.Receive(ch, d) }

// TestCallerLimitsResolve: a named caller's keys win, "*" fills the rest,
// and the built-in defaults what neither sets.
func TestCallerLimitsResolve(t *testing.T) {
	table, err := ParseTable([]byte(fairTable + `callers:
  "*": {max_requests: 8, send_rate: 2.5}
  alice: {max_requests: 3, send_burst: 20}
  bob: {send_rate: 0}
`))
	if err != nil {
		t.Fatal(err)
	}
	noCallers, err := ParseTable([]byte(fairTable))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		table *Table
		user  string
		want  callerLimits
	}{
		{name: "own keys over everyone's", table: table, user: "alice", want: callerLimits{maxRequests: 3, sendRate: 2.5, sendBurst: 20}},
		{name: "everyone's, burst from the rate", table: table, user: "carol", want: callerLimits{maxRequests: 8, sendRate: 2.5, sendBurst: 3}},
		{name: "a rate of 0 is no bound", table: table, user: "bob", want: callerLimits{maxRequests: 8}},
		{name: "built-in defaults", table: noCallers, user: "alice", want: callerLimits{maxRequests: 16}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.table.limits(tc.user, 16); got != tc.want {
				t.Fatalf("limits of %s = %+v, want %+v", tc.user, got, tc.want)
			}
		})
	}
}
