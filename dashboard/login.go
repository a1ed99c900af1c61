package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/logging"
)

// loginView is what the login page shows.
type loginView struct {
	Error string
}

func (s *Server) loginForm(w http.ResponseWriter, r *http.Request) {
	if s.session(r) != nil {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.renderLogin(w, http.StatusOK, "")
}

func (s *Server) renderLogin(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_ = loginPage.Execute(w, loginView{Error: msg})
}

// login opens a NATS connection as the user with the password given: the
// server, not the dashboard, checks them, and the session then speaks to
// authz as that user only. The login gate comes first: a client, or an
// account, that failed too often lately waits (429), and past MaxLogins
// attempts under way, or MaxLoginsPerClient of this client's, the server
// is not asked at all (503). A login ends the session the browser still
// carries.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !s.sameOrigin(r) {
		s.renderLogin(w, http.StatusForbidden, "This login did not come from the dashboard's own page.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		s.renderLogin(w, http.StatusBadRequest, "The login form was too large or malformed.")
		return
	}
	user, password := r.PostForm.Get("user"), r.PostForm.Get("password")
	if !validUser(user) || password == "" || len(password) > maxPassword {
		s.renderLogin(w, http.StatusBadRequest, "Give a user of nats.conf and its password.")
		return
	}
	from := s.cfg.ClientAddr(r)
	if wait := s.logins.wait(from, user); wait > 0 {
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		s.renderLogin(w, http.StatusTooManyRequests, fmt.Sprintf("Too many failed logins from here or for this user; try again in %d s.", secs))
		return
	}
	if ok, mine := s.logins.enter(from); !ok {
		msg := "Too many logins under way; try again in a moment."
		if mine {
			msg = "Too many logins under way from here; try again in a moment."
		}
		w.Header().Set("Retry-After", "1")
		s.renderLogin(w, http.StatusServiceUnavailable, msg)
		return
	}
	nc, err := s.cfg.Dial(user, password)
	s.logins.leave(from)
	if err != nil {
		s.logins.failed(from, user)
		s.log.Info("dashboard login refused", "user", logging.Capped(user), "client", logging.Capped(from), "err", logging.Cap(err.Error(), 256))
		s.renderLogin(w, http.StatusUnauthorized, "Wrong user or password.")
		return
	}
	s.logins.succeeded(from, user)
	c, err := client.New(nc, user, client.Config{Timeout: s.cfg.Timeout})
	if err != nil {
		nc.Close()
		s.log.Warn("dashboard login: no client", "user", user, "err", err)
		s.renderLogin(w, http.StatusInternalServerError, "The connection cannot speak to authz as this user.")
		return
	}
	replaced := ""
	if old, err := r.Cookie(s.cookie); err == nil {
		replaced = old.Value
	}
	ss, err := s.sessions.add(user, replaced, nc, c)
	if err != nil {
		nc.Close()
		s.renderLogin(w, http.StatusServiceUnavailable, "Too many sessions are open; try again later.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: s.cookie, Value: ss.token, Path: "/", HttpOnly: true,
		Secure: s.secure(r), SameSite: http.SameSiteStrictMode})
	s.log.Info("dashboard login", "user", user)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(r *http.Request, ss *session, _ []byte) (any, error) {
	s.sessions.remove(ss.token)
	return map[string]bool{"ok": true}, nil
}

// SessionInfo tells the page who is logged in, whether authz lets them
// operate (the owner's views and actions), its CSRF token and how often to
// refresh.
type SessionInfo struct {
	User      string `json:"user"`
	Operator  bool   `json:"operator"`
	CSRF      string `json:"csrf"`
	RefreshMS int64  `json:"refresh_ms"`
}

// sessionInfo asks authz whether the user may see the owner's views: the
// page shows them, and their buttons, only then. authz checks every
// request again regardless.
func (s *Server) sessionInfo(r *http.Request, ss *session) (any, error) {
	_, err := ss.c.Domains(r.Context())
	if err != nil && !errors.Is(err, client.ErrForbidden) && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	return &SessionInfo{User: ss.user, Operator: err == nil, CSRF: ss.csrf, RefreshMS: s.cfg.Refresh.Milliseconds()}, nil
}
