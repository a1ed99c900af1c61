package dashboard

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Bounds of login attempts. Each attempt is a NATS connection whose
// password the server checks against a bcrypt hash, on purpose slow: the
// gate keeps anyone from spending the server's CPU on guesses, and one
// client from taking the places another's login needs.
const (
	// loginFreeFailures is the failed logins a client, or an account, may
	// have before it must wait: a person mistyping is not held up.
	loginFreeFailures = 3
	// loginBackoff is the first wait; each further failure doubles it, up
	// to maxLoginBackoff.
	loginBackoff    = time.Second
	maxLoginBackoff = 5 * time.Minute
	// loginForget is how long after its last failure a count is dropped.
	loginForget = time.Hour
	// maxLoginClients bounds the counts of each kind remembered (clients,
	// accounts, and clients per account); past it the one that failed
	// longest ago is forgotten.
	maxLoginClients = 4096
	// knownForget is how long a client an account logged in from is
	// remembered, and maxKnownPerAccount how many per account: the
	// account's wait does not hold those back.
	knownForget        = 30 * 24 * time.Hour
	maxKnownPerAccount = 8
)

// loginGate admits login attempts: a bounded number under way at once, and
// fewer from one client, so that one client cannot take every place; and
// none that a count of recent failures holds back.
//
// Failures are counted three ways: by client, by account tried, and by
// both. A client waits when its own count is past loginFreeFailures, and
// so does a login to an account whose count is, unless the account logged
// in from that client before (so guesses at an account from elsewhere do
// not lock its user out where they usually log in). A good login forgives
// only the failures of its client at its account: a person's own
// mistyping, never guesses at another account from the same client.
type loginGate struct {
	max, perClient int
	now            func() time.Time

	mu       sync.Mutex
	under    int            // attempts under way
	underBy  map[string]int // attempts under way by client
	clients  failureCounts[string]
	accounts failureCounts[string]
	pairs    failureCounts[loginPair]
	known    map[string][]knownClient // by account
}

// loginPair is a client's failures at one account.
type loginPair struct{ client, account string }

// knownClient is a client an account logged in from, and when last.
type knownClient struct {
	client string
	at     time.Time
}

func newLoginGate(concurrent, perClient int, now func() time.Time) *loginGate {
	return &loginGate{max: concurrent, perClient: perClient, now: now, underBy: map[string]int{},
		clients:  failureCounts[string]{m: map[string]*loginFailures{}},
		accounts: failureCounts[string]{m: map[string]*loginFailures{}},
		pairs:    failureCounts[loginPair]{m: map[loginPair]*loginFailures{}},
		known:    map[string][]knownClient{}}
}

// wait returns how long client must wait before its next attempt at
// account; 0 when it may try now.
func (g *loginGate) wait(client, account string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	w := g.clients.wait(client, now)
	if !g.isKnown(account, client, now) {
		w = max(w, g.accounts.wait(account, now))
	}
	return w
}

// enter takes a place for client's attempt. It returns ok false when
// every place is taken, or mine true with it when client's share is.
// Each ok is followed by one leave.
func (g *loginGate) enter(client string) (ok, mine bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.underBy[client] >= g.perClient {
		return false, true
	}
	if g.under >= g.max {
		return false, false
	}
	g.under++
	g.underBy[client]++
	return true, false
}

func (g *loginGate) leave(client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.under--
	if g.underBy[client]--; g.underBy[client] <= 0 {
		delete(g.underBy, client)
	}
}

// failed counts a refused login of client at account.
func (g *loginGate) failed(client, account string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.clients.add(client, now)
	g.accounts.add(account, now)
	g.pairs.add(loginPair{client, account}, now)
}

// succeeded forgives client's failures at account, and no others, and
// remembers that account logs in from client.
func (g *loginGate) succeeded(client, account string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	p := loginPair{client, account}
	if f := g.pairs.m[p]; f != nil {
		g.clients.sub(client, f.n)
		g.accounts.sub(account, f.n)
		delete(g.pairs.m, p)
	}
	known := g.known[account]
	for i, k := range known {
		if k.client == client {
			known = append(known[:i], known[i+1:]...)
			break
		}
	}
	if len(known) >= maxKnownPerAccount {
		known = known[1:]
	}
	if _, ok := g.known[account]; !ok && len(g.known) >= maxLoginClients {
		g.forgetKnown(now, true)
	}
	g.known[account] = append(known, knownClient{client: client, at: now})
}

// isKnown says whether account logged in from client lately. Called with
// mu held.
func (g *loginGate) isKnown(account, client string, now time.Time) bool {
	for _, k := range g.known[account] {
		if k.client == client {
			return now.Sub(k.at) <= knownForget
		}
	}
	return false
}

// sweep drops the counts that have not grown for loginForget and the
// clients not logged in from for knownForget.
func (g *loginGate) sweep() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.clients.forget(now)
	g.accounts.forget(now)
	g.pairs.forget(now)
	g.forgetKnown(now, false)
}

// forgetKnown drops the clients not logged in from for knownForget and,
// with full, the account whose last login is oldest. Called with mu held.
func (g *loginGate) forgetKnown(now time.Time, full bool) {
	var stalest string
	var stalestAt time.Time
	for account, known := range g.known {
		kept := known[:0]
		for _, k := range known {
			if now.Sub(k.at) <= knownForget {
				kept = append(kept, k)
			}
		}
		if len(kept) == 0 {
			delete(g.known, account)
			continue
		}
		g.known[account] = kept
		if last := kept[len(kept)-1].at; stalest == "" || last.Before(stalestAt) {
			stalest, stalestAt = account, last
		}
	}
	if full && len(g.known) >= maxLoginClients {
		delete(g.known, stalest)
	}
}

// failureCounts is failures in a row by key, at most maxLoginClients.
type failureCounts[K comparable] struct{ m map[K]*loginFailures }

// loginFailures is one key's failed logins.
type loginFailures struct {
	n    int
	last time.Time // the last failure
}

// wait is how long k must still wait at now.
func (c failureCounts[K]) wait(k K, now time.Time) time.Duration {
	f := c.m[k]
	if f == nil || f.n < loginFreeFailures {
		return 0
	}
	return max(0, f.last.Add(backoff(f.n-loginFreeFailures)).Sub(now))
}

func (c failureCounts[K]) add(k K, now time.Time) {
	f := c.m[k]
	if f == nil {
		if len(c.m) >= maxLoginClients {
			c.forget(now)
		}
		f = &loginFailures{}
		c.m[k] = f
	}
	f.n++
	f.last = now
}

// sub forgives n of k's failures.
func (c failureCounts[K]) sub(k K, n int) {
	if f := c.m[k]; f != nil {
		if f.n -= n; f.n <= 0 {
			delete(c.m, k)
		}
	}
}

// forget drops the keys that have not failed for loginForget and, when
// still full, the one that failed longest ago.
func (c failureCounts[K]) forget(now time.Time) {
	var stalest *K
	for k, f := range c.m {
		if now.Sub(f.last) > loginForget {
			delete(c.m, k)
		} else if stalest == nil || f.last.Before(c.m[*stalest].last) {
			stalest = &k
		}
	}
	if stalest != nil && len(c.m) >= maxLoginClients {
		delete(c.m, *stalest)
	}
}

// backoff is the wait after the free failures and n more.
func backoff(n int) time.Duration {
	if n >= 20 {
		return maxLoginBackoff
	}
	return min(loginBackoff<<n, maxLoginBackoff)
}

// remoteHost is the default Config.ClientAddr: the host of the address the
// request came from; for IPv6 its /64, which one machine usually has whole.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	if ip = ip.Unmap(); ip.Is6() {
		p, _ := ip.WithZone("").Prefix(64)
		return p.String()
	}
	return ip.String()
}
