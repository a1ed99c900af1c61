package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/client"
)

// cookieName is the session cookie; secureCookieName is its name when the
// dashboard is served over https (Config.PublicURL): the __Host- prefix
// makes a browser keep it only if it is Secure, for this host and path /.
const (
	cookieName       = "tickflow_session"
	secureCookieName = "__Host-tickflow_session"
)

// errFull refuses a login while MaxSessions sessions are open.
var errFull = errors.New("dashboard: too many sessions open; try again later")

// session is one logged-in user: their own NATS connection and the authz
// client over it, and the token every POST must carry.
type session struct {
	token, csrf, user string
	nc                *nats.Conn
	c                 *client.Client
	created           time.Time
	lastUsed          time.Time // guarded by sessions.mu
}

// sessionLimits bound the sessions: in number, per user, in idle time and
// in age.
type sessionLimits struct {
	max, perUser   int
	idle, lifetime time.Duration
}

// sessions holds the open sessions by token.
type sessions struct {
	mu  sync.Mutex
	m   map[string]*session
	lim sessionLimits
	now func() time.Time
}

func newSessions(lim sessionLimits, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, lim: lim, now: now}
}

// randomToken returns 256 random bits, hex-encoded.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// expired says whether ss sat idle too long or is older than a session
// may be, however busy.
func (s *sessions) expired(ss *session, now time.Time) bool {
	return now.Sub(ss.lastUsed) > s.lim.idle || now.Sub(ss.created) >= s.lim.lifetime
}

// add opens a session for user over nc. It first ends the expired
// sessions, the session replaced (the one the browser logging in still
// carries; "" for none) and, while user has perUser sessions, the user's
// oldest: so a user can hold only a few of the sessions, and one more login
// never locks anyone out. errFull when the other users' sessions fill every
// place.
func (s *sessions) add(user, replaced string, nc *nats.Conn, c *client.Client) (*session, error) {
	var ended []*session
	defer func() { closeSessions(ended) }()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	var mine []*session
	for k, ss := range s.m {
		switch {
		case k == replaced || s.expired(ss, now):
			ended = append(ended, ss)
			delete(s.m, k)
		case ss.user == user:
			mine = append(mine, ss)
		}
	}
	for len(mine) >= s.lim.perUser {
		oldest := 0
		for i, ss := range mine {
			if ss.created.Before(mine[oldest].created) {
				oldest = i
			}
		}
		ended = append(ended, mine[oldest])
		delete(s.m, mine[oldest].token)
		mine = append(mine[:oldest], mine[oldest+1:]...)
	}
	if len(s.m) >= s.lim.max {
		return nil, errFull
	}
	ss := &session{token: randomToken(), csrf: randomToken(), user: user, nc: nc, c: c, created: now, lastUsed: now}
	s.m[ss.token] = ss
	return ss, nil
}

// get returns the live session of token and marks it used; nil when there
// is none or it expired.
func (s *sessions) get(token string) *session {
	if len(token) != 64 {
		return nil
	}
	s.mu.Lock()
	ss := s.m[token]
	if ss == nil {
		s.mu.Unlock()
		return nil
	}
	now := s.now()
	if s.expired(ss, now) {
		delete(s.m, token)
		s.mu.Unlock()
		ss.nc.Close()
		return nil
	}
	ss.lastUsed = now
	s.mu.Unlock()
	return ss
}

// remove ends the session of token.
func (s *sessions) remove(token string) {
	s.mu.Lock()
	ss := s.m[token]
	delete(s.m, token)
	s.mu.Unlock()
	if ss != nil {
		ss.nc.Close()
	}
}

// sweep ends the expired sessions.
func (s *sessions) sweep() {
	var ended []*session
	s.mu.Lock()
	now := s.now()
	for k, ss := range s.m {
		if s.expired(ss, now) {
			ended = append(ended, ss)
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
	closeSessions(ended)
}

// closeAll ends every session.
func (s *sessions) closeAll() {
	s.mu.Lock()
	all := s.m
	s.m = map[string]*session{}
	s.mu.Unlock()
	for _, ss := range all {
		ss.nc.Close()
	}
}

func closeSessions(ended []*session) {
	for _, ss := range ended {
		ss.nc.Close()
	}
}
