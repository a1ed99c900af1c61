package dashboard

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/tickflow/tickflow/client"
	"github.com/tickflow/tickflow/logging"
	"github.com/tickflow/tickflow/pipeline"
)

// Bounds of what a request may carry.
const (
	// maxLoginBody bounds the login form.
	maxLoginBody = 4 << 10
	// maxActionBody bounds the JSON body of an action.
	maxActionBody = 4 << 10
	// maxUser and maxPassword bound the login fields.
	maxUser, maxPassword = 64, 1024
	// csrfHeader carries the session's CSRF token on every POST.
	csrfHeader = "X-Tickflow-Csrf"
)

var loginPage = template.Must(template.ParseFS(assets, "static/login.html"))

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", s.loginForm)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("GET /static/style.css", s.asset("style.css", "text/css; charset=utf-8"))
	mux.HandleFunc("GET /{$}", s.page(s.asset("index.html", "text/html; charset=utf-8")))
	mux.HandleFunc("GET /static/app.js", s.page(s.asset("app.js", "text/javascript; charset=utf-8")))
	mux.HandleFunc("POST /logout", s.action(s.logout))
	mux.HandleFunc("GET /api/session", s.api(s.sessionInfo))
	mux.HandleFunc("GET /api/domains", s.api(s.getDomains))
	mux.HandleFunc("GET /api/inflight", s.api(s.getInFlight))
	mux.HandleFunc("GET /api/presence", s.api(s.getPresence))
	mux.HandleFunc("GET /api/batch", s.api(s.getBatch))
	mux.HandleFunc("GET /api/dlq", s.api(s.getDLQ))
	mux.HandleFunc("GET /api/list", s.api(s.getList))
	mux.HandleFunc("POST /api/pause", s.action(s.pause))
	mux.HandleFunc("POST /api/resume", s.action(s.resume))
	mux.HandleFunc("POST /api/replay", s.action(s.replay))
	mux.HandleFunc("POST /api/purge", s.action(s.purge))
	mux.HandleFunc("POST /api/cancel", s.action(s.cancel))
	return secure(s.hostGate(mux))
}

// secure sets the headers every answer carries: only the dashboard's own
// scripts and styles run, no page frames it, nothing is cached.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) asset(name, contentType string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := fs.ReadFile(s.static, name)
		if err != nil {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(data)
	}
}

// session returns the request's session, or nil.
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(s.cookie)
	if err != nil {
		return nil
	}
	return s.sessions.get(c.Value)
}

// page serves h to a logged-in user and sends anyone else to the login.
func (s *Server) page(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.session(r) == nil {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		h(w, r)
	}
}

// api answers a read as JSON, for a logged-in user only.
func (s *Server) api(h func(r *http.Request, ss *session) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := s.session(r)
		if ss == nil {
			writeError(w, http.StatusUnauthorized, "log in first")
			return
		}
		out, err := h(r, ss)
		s.reply(w, r, ss, out, err)
	}
}

// action answers a POST of a logged-in user that carries the session's
// CSRF token and comes from the dashboard's own origin.
func (s *Server) action(h func(r *http.Request, ss *session, body []byte) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss := s.session(r)
		if ss == nil {
			writeError(w, http.StatusUnauthorized, "log in first")
			return
		}
		if !s.sameOrigin(r) || subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(ss.csrf)) != 1 {
			writeError(w, http.StatusForbidden, "this request did not come from the dashboard's page (missing or wrong CSRF token)")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxActionBody))
		if err != nil {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", maxActionBody))
			return
		}
		out, err := h(r, ss, body)
		s.reply(w, r, ss, out, err)
	}
}

func (s *Server) reply(w http.ResponseWriter, r *http.Request, ss *session, out any, err error) {
	if err != nil {
		code, msg := status(err)
		if code >= 500 {
			s.log.Warn("dashboard request failed", "path", logging.Capped(r.URL.Path), "user", ss.user, "err", logging.Cap(err.Error(), 512))
		}
		writeError(w, code, msg)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// badRequest is a request the dashboard refuses before asking authz.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, args ...any) error { return &badRequest{msg: fmt.Sprintf(format, args...)} }

// status maps an error to an HTTP status and the message shown: authz's
// own code and message where it answered.
func status(err error) (int, string) {
	var ae *client.Error
	var br *badRequest
	switch {
	case errors.As(err, &br):
		return http.StatusBadRequest, br.msg
	case errors.As(err, &ae):
		code := ae.Code
		if code < 400 || code > 599 {
			code = http.StatusBadGateway
		}
		return code, logging.Cap(ae.Message, 512)
	case errors.Is(err, client.ErrInvalid):
		return http.StatusBadRequest, logging.Cap(err.Error(), 512)
	case errors.Is(err, client.ErrNotRunning):
		return http.StatusServiceUnavailable, "authz is not running"
	case errors.Is(err, client.ErrNoAnswer):
		return http.StatusGatewayTimeout, "no answer from authz"
	}
	return http.StatusBadGateway, "the request to authz failed"
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": msg, "code": code})
}

// decode reads a JSON action body into v: one object, no unknown field.
func decode(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badf("request body: %s", logging.Cap(err.Error(), 256))
	}
	return nil
}

// queryUint reads a numeric query parameter; 0 when absent.
func queryUint(r *http.Request, name string) (uint64, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, badf("%s %q: expected a number", name, logging.Capped(v))
	}
	return n, nil
}

// queryInt reads a small non-negative numeric query parameter.
func queryInt(r *http.Request, name string) (int, error) {
	n, err := queryUint(r, name)
	if err != nil || n > 1<<20 {
		return 0, badf("%s: expected a number from 0 to %d", name, 1<<20)
	}
	return int(n), nil
}

// validUser says whether name can be a nats.conf user authz serves: one
// subject token.
func validUser(name string) bool {
	return len(name) <= maxUser && pipeline.ValidateDomain(name) == nil
}
