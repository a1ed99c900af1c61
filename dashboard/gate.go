package dashboard

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// Bounds of login attempts. Each attempt is a NATS connection whose
// password the server checks against a bcrypt hash, on purpose slow: the
// gate keeps anyone from spending the server's CPU on guesses.
const (
	// loginFreeFailures is the failed logins in a row a client may make
	// before it must wait: a person mistyping is not held up.
	loginFreeFailures = 3
	// loginBackoff is the first wait; each further failure doubles it, up
	// to maxLoginBackoff.
	loginBackoff    = time.Second
	maxLoginBackoff = 5 * time.Minute
	// loginForget is how long after its last failure a client's count is
	// dropped.
	loginForget = time.Hour
	// maxLoginClients bounds the clients whose failures are remembered;
	// past it the one that failed longest ago is forgotten.
	maxLoginClients = 4096
)

// loginGate admits login attempts: at most a few at once, and none from a
// client that failed too often lately until its wait has passed.
type loginGate struct {
	slots chan struct{}
	now   func() time.Time

	mu      sync.Mutex
	clients map[string]*loginFailures
}

// loginFailures is one client's failed logins in a row.
type loginFailures struct {
	n     int
	last  time.Time // the last failure
	until time.Time // no attempt before
}

func newLoginGate(concurrent int, now func() time.Time) *loginGate {
	return &loginGate{slots: make(chan struct{}, concurrent), now: now, clients: map[string]*loginFailures{}}
}

// wait returns how long client must wait before its next attempt; 0 when
// it may try now.
func (g *loginGate) wait(client string) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.clients[client]
	if f == nil {
		return 0
	}
	return max(0, f.until.Sub(g.now()))
}

// enter takes a place for an attempt; false when every place is taken.
// Each true is followed by one leave.
func (g *loginGate) enter() bool {
	select {
	case g.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (g *loginGate) leave() { <-g.slots }

// failed counts a refused login of client and sets its wait.
func (g *loginGate) failed(client string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	f := g.clients[client]
	if f == nil {
		if len(g.clients) >= maxLoginClients {
			g.forget(now)
		}
		f = &loginFailures{}
		g.clients[client] = f
	}
	f.n++
	f.last = now
	if f.n >= loginFreeFailures {
		f.until = now.Add(backoff(f.n - loginFreeFailures))
	}
}

// backoff is the wait after the free failures and n more.
func backoff(n int) time.Duration {
	if n >= 20 {
		return maxLoginBackoff
	}
	return min(loginBackoff<<n, maxLoginBackoff)
}

// succeeded clears client's failures.
func (g *loginGate) succeeded(client string) {
	g.mu.Lock()
	delete(g.clients, client)
	g.mu.Unlock()
}

// sweep drops the clients that have not failed for loginForget.
func (g *loginGate) sweep() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.forget(g.now())
}

// forget drops the clients that have not failed for loginForget and, when
// still full, the one that failed longest ago. Called with mu held.
func (g *loginGate) forget(now time.Time) {
	var stalest string
	for c, f := range g.clients {
		if now.Sub(f.last) > loginForget {
			delete(g.clients, c)
		} else if stalest == "" || f.last.Before(g.clients[stalest].last) {
			stalest = c
		}
	}
	if len(g.clients) >= maxLoginClients {
		delete(g.clients, stalest)
	}
}

// remoteHost is the default Config.ClientAddr: the host of the address the
// request came from.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
