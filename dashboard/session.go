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

// cookieName is the session cookie.
const cookieName = "tickflow_session"

// errFull refuses a login while MaxSessions sessions are open.
var errFull = errors.New("dashboard: too many sessions open; try again later")

// session is one logged-in user: their own NATS connection and the authz
// client over it, and the token every POST must carry.
type session struct {
	token, csrf, user string
	nc                *nats.Conn
	c                 *client.Client
	lastUsed          time.Time // guarded by sessions.mu
}

// sessions holds the open sessions by token, bounded in number and idle
// time.
type sessions struct {
	mu   sync.Mutex
	m    map[string]*session
	max  int
	idle time.Duration
	now  func() time.Time
}

func newSessions(max int, idle time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[string]*session{}, max: max, idle: idle, now: now}
}

// randomToken returns 256 random bits, hex-encoded.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// add opens a session for user over nc; errFull when there are too many,
// after dropping the idle ones.
func (s *sessions) add(user string, nc *nats.Conn, c *client.Client) (*session, error) {
	s.sweep()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= s.max {
		return nil, errFull
	}
	ss := &session{token: randomToken(), csrf: randomToken(), user: user, nc: nc, c: c, lastUsed: s.now()}
	s.m[ss.token] = ss
	return ss, nil
}

// get returns the live session of token and marks it used; nil when there
// is none or it sat idle too long.
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
	if now.Sub(ss.lastUsed) > s.idle {
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

// sweep ends the sessions idle too long.
func (s *sessions) sweep() {
	var idle []*session
	s.mu.Lock()
	now := s.now()
	for k, ss := range s.m {
		if now.Sub(ss.lastUsed) > s.idle {
			idle = append(idle, ss)
			delete(s.m, k)
		}
	}
	s.mu.Unlock()
	for _, ss := range idle {
		ss.nc.Close()
	}
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
