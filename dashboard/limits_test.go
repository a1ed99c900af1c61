package dashboard_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/dashboard"
)

// live says whether cookie is a session the dashboard still serves.
func (b *bundle) live(t *testing.T, cookie *http.Cookie) bool {
	t.Helper()
	code, _ := b.call(t, http.MethodGet, "/", cookie, "", "")
	return code == http.StatusOK
}

// TestSessionsPerUser: one user's logins end that user's oldest session
// past the per-user bound, so however often a user logs in, another user
// still finds a place; a login ends the session the browser carried.
func TestSessionsPerUser(t *testing.T) {
	b := setup(t, func(c *dashboard.Config) { c.MaxSessions, c.MaxSessionsPerUser = 3, 2 })
	var alice []*http.Cookie
	for i := range 5 {
		resp, c := b.login(t, "alice", "local-alice")
		if c == nil {
			t.Fatalf("alice's login %d: %d", i+1, resp.StatusCode)
		}
		alice = append(alice, c)
	}
	for i, c := range alice {
		if want := i >= 3; b.live(t, c) != want {
			t.Errorf("alice's session %d live: %v, want %v", i+1, !want, want)
		}
	}
	_, owner := b.login(t, "owner", "local-owner")
	if owner == nil || !b.live(t, owner) {
		t.Fatal("the owner cannot log in after alice's logins")
	}
	if resp, c := b.login(t, "bob", "local-bob"); c != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("bob past MaxSessions: %d with a cookie %v, want 503", resp.StatusCode, c != nil)
	}

	// Logging in again from a browser that has a session ends that one,
	// not the user's oldest.
	resp, again := b.loginWith(t, "alice", "local-alice", alice[4])
	if again == nil {
		t.Fatalf("alice logs in again: %d", resp.StatusCode)
	}
	if b.live(t, alice[4]) || !b.live(t, alice[3]) || !b.live(t, again) {
		t.Fatalf("after a login with a session: replaced %v, older %v, new %v; want false, true, true",
			b.live(t, alice[4]), b.live(t, alice[3]), b.live(t, again))
	}
}

// TestSessionLifetime: a session kept in use ends MaxLifetime after its
// login all the same; one left unused ends after IdleTimeout.
func TestSessionLifetime(t *testing.T) {
	clk := newClock()
	b := setup(t, func(c *dashboard.Config) { c.Now = clk.Now })
	_, owner := b.login(t, "owner", "local-owner")
	if owner == nil {
		t.Fatal("owner's login failed")
	}
	step := dashboard.DefaultIdleTimeout - time.Minute
	used := time.Duration(0)
	for ; used+step < dashboard.DefaultMaxLifetime; used += step {
		clk.advance(step)
		if !b.live(t, owner) {
			t.Fatalf("a session in use ended %v after its login", used+step)
		}
	}
	clk.advance(dashboard.DefaultMaxLifetime - used)
	if b.live(t, owner) {
		t.Fatalf("a session in use lives on %v after its login", dashboard.DefaultMaxLifetime)
	}

	_, alice := b.login(t, "alice", "local-alice")
	clk.advance(dashboard.DefaultIdleTimeout + time.Second)
	if alice == nil || b.live(t, alice) {
		t.Fatalf("a session unused for %v lives on", dashboard.DefaultIdleTimeout)
	}
}

// TestLoginBackoff: after a few failed logins a client must wait, doubling
// with each further failure, and the NATS server is not asked meanwhile;
// another client logging in to another account is not held up; a good
// login clears the count.
func TestLoginBackoff(t *testing.T) {
	clk := newClock()
	var dials atomic.Int64
	b := setup(t, func(c *dashboard.Config) {
		c.Now = clk.Now
		c.ClientAddr = func(r *http.Request) string { return r.Header.Get("X-Client") }
		dial := c.Dial
		c.Dial = func(user, password string) (*nats.Conn, error) {
			dials.Add(1)
			return dial(user, password)
		}
	})
	try := func(client, user, password string, want int, retryAfter string) {
		t.Helper()
		before := dials.Load()
		resp, _ := b.loginWith(t, user, password, "X-Client", client)
		if resp.StatusCode != want || resp.Header.Get("Retry-After") != retryAfter {
			t.Fatalf("client %s: %d, Retry-After %q; want %d, %q", client, resp.StatusCode, resp.Header.Get("Retry-After"), want, retryAfter)
		}
		if dialed := dials.Load() > before; dialed != (want != http.StatusTooManyRequests) {
			t.Fatalf("client %s answered %d: the server asked %v", client, want, dialed)
		}
	}
	for range 3 {
		try("a", "owner", "wrong", http.StatusUnauthorized, "")
	}
	try("a", "owner", "local-owner", http.StatusTooManyRequests, "1")
	try("b", "alice", "local-alice", http.StatusSeeOther, "")
	clk.advance(time.Second)
	try("a", "owner", "wrong", http.StatusUnauthorized, "")
	try("a", "owner", "local-owner", http.StatusTooManyRequests, "2")
	clk.advance(time.Second)
	try("a", "owner", "local-owner", http.StatusTooManyRequests, "1")
	clk.advance(time.Second)
	try("a", "owner", "local-owner", http.StatusSeeOther, "")
	for range 3 {
		try("a", "owner", "wrong", http.StatusUnauthorized, "")
	}
}

// TestLoginBackoffPerAccount: failed logins count against the account
// tried as well as the address they come from, and a good login forgives
// only its own address's failures for its own account. An address that
// logs in to its own account between guesses at another's is held back
// all the same; guesses at one account from many addresses are held back;
// the account's owner, from an address they logged in from before, and
// other accounts are not.
func TestLoginBackoffPerAccount(t *testing.T) {
	clk := newClock()
	var mu sync.Mutex
	dials := map[string]int{}
	b := setup(t, func(c *dashboard.Config) {
		c.Now = clk.Now
		c.ClientAddr = func(r *http.Request) string { return r.Header.Get("X-Client") }
		dial := c.Dial
		c.Dial = func(user, password string) (*nats.Conn, error) {
			mu.Lock()
			dials[user]++
			mu.Unlock()
			return dial(user, password)
		}
	})
	try := func(client, user, password string) int {
		t.Helper()
		resp, _ := b.loginWith(t, user, password, "X-Client", client)
		return resp.StatusCode
	}
	dialed := func(user string) int {
		mu.Lock()
		defer mu.Unlock()
		return dials[user]
	}

	// From one address, a wrong owner password after each of alice's
	// own good logins.
	var owner []int
	for range 40 {
		try("x", "alice", "local-alice")
		owner = append(owner, try("x", "owner", "wrong"))
	}
	for i, code := range owner {
		if want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusTooManyRequests}[i < 3]; code != want {
			t.Fatalf("wrong owner password %d of 40, each after alice's good login: %d, want %d (all: %v)", i+1, code, want, owner)
		}
	}
	if n := dialed("owner"); n != 3 {
		t.Fatalf("the server checked %d of the 40 owner passwords, want 3", n)
	}

	// From many addresses, one guess each at bob's password.
	if code := try("home", "bob", "local-bob"); code != http.StatusSeeOther {
		t.Fatalf("bob logs in from home: %d", code)
	}
	for i := range 10 {
		want := map[bool]int{true: http.StatusUnauthorized, false: http.StatusTooManyRequests}[i < 3]
		if code := try(fmt.Sprintf("guess-%d", i), "bob", "wrong"); code != want {
			t.Fatalf("guess %d at bob's password from its own address: %d, want %d", i+1, code, want)
		}
	}
	if n := dialed("bob"); n != 4 {
		t.Fatalf("the server checked %d of bob's logins, want 4 (his own and 3 guesses)", n)
	}
	if code := try("home", "bob", "local-bob"); code != http.StatusSeeOther {
		t.Fatalf("bob, from where he logged in before, during the guesses: %d, want 303", code)
	}
	if code := try("z", "alice", "local-alice"); code != http.StatusSeeOther {
		t.Fatalf("alice from another address during the guesses at bob's: %d, want 303", code)
	}
	if code := try("guess-10", "bob", "wrong"); code != http.StatusTooManyRequests {
		t.Fatalf("a guess at bob's password after his own good login: %d, want 429", code)
	}
	clk.advance(time.Second)
	if code := try("new", "bob", "local-bob"); code != http.StatusSeeOther {
		t.Fatalf("bob from a new address once the wait is over: %d, want 303", code)
	}
}

// TestLoginsUnderWay: past MaxLogins attempts under way, from clients
// each within its own share, a login is answered 503 at once, without
// asking the server; a place frees when an attempt ends.
func TestLoginsUnderWay(t *testing.T) {
	entered, release := make(chan string, 4), make(chan struct{})
	var hold atomic.Bool
	hold.Store(true)
	b := setup(t, func(c *dashboard.Config) {
		c.MaxLogins, c.MaxLoginsPerClient = 2, 1
		c.ClientAddr = func(r *http.Request) string { return r.Header.Get("X-Client") }
		dial := c.Dial
		c.Dial = func(user, password string) (*nats.Conn, error) {
			if hold.Load() {
				entered <- user
				<-release
			}
			return dial(user, password)
		}
	})
	done := make(chan error, 2)
	for _, u := range []string{"owner", "alice"} {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, b.url+"/login", strings.NewReader("user="+u+"&password=local-"+u))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("X-Client", u)
			resp, err := browserless.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusSeeOther {
					err = errors.New(u + ": " + resp.Status)
				}
			}
			done <- err
		}()
	}
	<-entered
	<-entered
	if resp, c := b.loginWith(t, "bob", "local-bob", "X-Client", "bob"); c != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a third login under way: %d, cookie %v, Retry-After %q; want 503", resp.StatusCode, c != nil, resp.Header.Get("Retry-After"))
	}
	if len(entered) != 0 {
		t.Fatal("the third login asked the server")
	}
	hold.Store(false)
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if _, c := b.loginWith(t, "bob", "local-bob", "X-Client", "bob"); c == nil {
		t.Fatal("bob cannot log in once the others are done")
	}
}

// TestLoginsUnderWayPerClient: one client logging in many times at once
// takes no more than its share of the logins under way, so another
// client's login is still checked meanwhile.
func TestLoginsUnderWayPerClient(t *testing.T) {
	entered, release := make(chan struct{}, 8), make(chan struct{})
	b := setup(t, func(c *dashboard.Config) {
		c.MaxLogins = 4
		c.ClientAddr = func(r *http.Request) string { return r.Header.Get("X-Client") }
		dial := c.Dial
		c.Dial = func(user, password string) (*nats.Conn, error) {
			if user == "alice" {
				entered <- struct{}{}
				<-release
			}
			return dial(user, password)
		}
	})
	// Whatever the test finds, the held logins end before the dashboard
	// stops.
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free)
	const many = 6
	answered := make(chan int, many)
	for range many {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, b.url+"/login", strings.NewReader("user=alice&password=local-alice"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("X-Client", "x")
			resp, err := browserless.Do(req)
			if err != nil {
				answered <- 0
				return
			}
			resp.Body.Close()
			answered <- resp.StatusCode
		}()
	}
	// Each of alice's logins is either checked (held in Dial) or refused.
	var held, refused []int
	for len(held)+len(refused) < many {
		select {
		case <-entered:
			held = append(held, 0)
		case code := <-answered:
			if code != http.StatusServiceUnavailable {
				t.Fatalf("one of alice's logins at once from one address: %d, want 503", code)
			}
			refused = append(refused, code)
		}
	}
	resp, owner := b.loginWith(t, "owner", "local-owner", "X-Client", "y")
	free()
	for range held {
		if code := <-answered; code != http.StatusSeeOther {
			t.Errorf("one of alice's logins let through: %d, want 303", code)
		}
	}
	if owner == nil {
		t.Fatalf("the owner from another address while alice logs in %d times at once (%d checked): %d, want 303", many, len(held), resp.StatusCode)
	}
	if len(held) >= 4 {
		t.Fatalf("alice took %d of the 4 logins under way from one address", len(held))
	}
}

// TestPublicURL: served behind a TLS-terminating proxy at PublicURL, the
// dashboard answers to the public host as well as the address the proxy
// dials, the session cookie is Secure with the __Host- prefix, and a login
// or POST must come from the public origin, not the address the proxy
// dials.
func TestPublicURL(t *testing.T) {
	const public = "https://dash.example.com"
	b := setup(t, func(c *dashboard.Config) { c.PublicURL = public + "/" })
	internal := b.url // the origin of the address the proxy dials
	if resp, c := b.loginWith(t, "owner", "local-owner", "Origin", internal); c != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a login from the internal origin: %d, cookie %v; want 403", resp.StatusCode, c != nil)
	}
	if resp, c := b.loginWith(t, "owner", "local-owner", "Host", "dash.example.com", "Origin", public); c == nil {
		t.Fatalf("a login from the public origin, Host forwarded by the proxy: %d", resp.StatusCode)
	}
	resp, owner := b.loginWith(t, "owner", "local-owner", "Origin", public)
	if owner == nil {
		t.Fatalf("a login from the public origin: %d", resp.StatusCode)
	}
	if owner.Name != "__Host-tickflow_session" || !owner.Secure || owner.Path != "/" || owner.Domain != "" || !owner.HttpOnly {
		t.Fatalf("cookie %+v: want __Host-tickflow_session, Secure, HttpOnly, Path=/ and no Domain", owner)
	}
	if b.live(t, &http.Cookie{Name: "tickflow_session", Value: owner.Value}) {
		t.Fatal("the session is served under the plain cookie name")
	}
	csrf := b.session(t, owner).CSRF
	if code, _ := b.call(t, http.MethodPost, "/api/pause", owner, csrf, `{"domain":"pay"}`, "Origin", internal); code != http.StatusForbidden {
		t.Fatalf("a POST from the internal origin: %d, want 403", code)
	}
	if code, out := b.call(t, http.MethodPost, "/api/pause", owner, csrf, `{"domain":"pay"}`, "Origin", public); code != http.StatusOK {
		t.Fatalf("a POST from the public origin: %d %v", code, out)
	}

	for _, bad := range []string{"http://dash.example.com", "https://dash.example.com/tickflow", "dash.example.com", "https://dash.example.com?x=1", "https://user@dash.example.com", "https://"} {
		_, err := dashboard.New(dashboard.Config{Dial: func(string, string) (*nats.Conn, error) { return nil, nil }, PublicURL: bad})
		if !errors.Is(err, dashboard.ErrConfig) {
			t.Errorf("PublicURL %q: %v, want ErrConfig", bad, err)
		}
	}
}
