package dashboard_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/dashboard"
)

// call makes a request with the session cookie (if any), the CSRF token
// (if any) and extra headers, and returns the status and decoded body.
func (b *bundle) call(t *testing.T, method, path string, cookie *http.Cookie, csrf, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, b.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	if csrf != "" {
		req.Header.Set("X-Tickflow-Csrf", csrf)
	}
	for i := 0; i+1 < len(header); i += 2 {
		setHeader(req, header[i], header[i+1])
	}
	resp, err := browserless.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(data, &out)
	return resp.StatusCode, out
}

// setHeader sets a request header; Host is the request's Host, which the
// client sends in place of the header map's.
func setHeader(req *http.Request, name, value string) {
	if http.CanonicalHeaderKey(name) == "Host" {
		req.Host = value
		return
	}
	req.Header.Set(name, value)
}

func (b *bundle) session(t *testing.T, cookie *http.Cookie) dashboard.SessionInfo {
	t.Helper()
	code, out := b.call(t, http.MethodGet, "/api/session", cookie, "", "")
	if code != http.StatusOK {
		t.Fatalf("session: %d %v", code, out)
	}
	data, _ := json.Marshal(out)
	var info dashboard.SessionInfo
	_ = json.Unmarshal(data, &info)
	return info
}

// TestAuthentication: nothing but the login page is served without a
// session; a session is made only with the user's own NATS credentials and
// carried by an HttpOnly, SameSite=Strict cookie; logging out ends it.
func TestAuthentication(t *testing.T) {
	b := setup(t)
	for _, path := range []string{"/", "/static/app.js"} {
		if code, _ := b.call(t, http.MethodGet, path, nil, "", ""); code != http.StatusSeeOther {
			t.Errorf("GET %s without a session: %d, want a redirect to the login", path, code)
		}
	}
	for _, path := range []string{"/api/session", "/api/domains", "/api/inflight?domain=pay", "/api/presence", "/api/batch?id=1", "/api/dlq", "/api/list"} {
		if code, _ := b.call(t, http.MethodGet, path, nil, "", ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a session: %d, want 401", path, code)
		}
	}
	forged := &http.Cookie{Name: "tickflow_session", Value: strings.Repeat("ab", 32)}
	if code, _ := b.call(t, http.MethodGet, "/api/domains", forged, "", ""); code != http.StatusUnauthorized {
		t.Errorf("a made-up session: %d, want 401", code)
	}
	if code, _ := b.call(t, http.MethodGet, "/login", nil, "", ""); code != http.StatusOK {
		t.Errorf("login page: %d", code)
	}

	for _, bad := range []struct{ user, password string }{{"owner", "wrong"}, {"nobody", "local-nobody"}, {"owner", ""}, {"a.b", "x"}} {
		resp, c := b.login(t, bad.user, bad.password)
		if c != nil || resp.StatusCode < 400 {
			t.Errorf("login %s/%q: %d with cookie %v", bad.user, bad.password, resp.StatusCode, c)
		}
	}
	resp, cookie := b.login(t, "owner", "local-owner")
	if resp.StatusCode != http.StatusSeeOther || cookie == nil {
		t.Fatalf("owner login: %d %v", resp.StatusCode, cookie)
	}
	if !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || len(cookie.Value) != 64 {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, 256 random bits", cookie)
	}
	if info := b.session(t, cookie); info.User != "owner" || !info.Operator || info.CSRF == "" {
		t.Fatalf("owner's session: %+v", info)
	}
	if code, _ := b.call(t, http.MethodGet, "/", cookie, "", ""); code != http.StatusOK {
		t.Fatalf("GET / with a session: %d", code)
	}
	csrf := b.session(t, cookie).CSRF
	if code, _ := b.call(t, http.MethodPost, "/logout", cookie, csrf, "{}"); code != http.StatusOK {
		t.Fatalf("logout: %d", code)
	}
	if code, _ := b.call(t, http.MethodGet, "/api/session", cookie, "", ""); code != http.StatusUnauthorized {
		t.Fatalf("after logout: %d, want 401", code)
	}
}

// TestActions: a POST needs the session's CSRF token and the dashboard's
// own origin, and a bounded, well-formed body; what it may do is authz's
// call for the logged-in user: alice may not pause, the owner may.
func TestActions(t *testing.T) {
	b := setup(t)
	_, owner := b.login(t, "owner", "local-owner")
	_, alice := b.login(t, "alice", "local-alice")
	if owner == nil || alice == nil {
		t.Fatal("login failed")
	}
	csrf := b.session(t, owner).CSRF
	body := `{"domain":"pay"}`
	for _, c := range []struct {
		name   string
		csrf   string
		body   string
		header []string
		want   int
	}{
		{name: "no CSRF token", body: body, want: http.StatusForbidden},
		{name: "another session's token", csrf: b.session(t, alice).CSRF, body: body, want: http.StatusForbidden},
		{name: "another site", csrf: csrf, body: body, header: []string{"Origin", "http://evil.example"}, want: http.StatusForbidden},
		{name: "a cross-site fetch", csrf: csrf, body: body, header: []string{"Sec-Fetch-Site", "cross-site"}, want: http.StatusForbidden},
		{name: "too large", csrf: csrf, body: `{"domain":"` + strings.Repeat("p", 8<<10) + `"}`, want: http.StatusRequestEntityTooLarge},
		{name: "unknown field", csrf: csrf, body: `{"domain":"pay","as":"owner"}`, want: http.StatusBadRequest},
		{name: "bad domain", csrf: csrf, body: `{"domain":"a.b"}`, want: http.StatusBadRequest},
	} {
		if code, out := b.call(t, http.MethodPost, "/api/pause", owner, c.csrf, c.body, c.header...); code != c.want {
			t.Errorf("%s: %d %v, want %d", c.name, code, out, c.want)
		}
	}
	if st, err := b.owner.Domains(b.ctx); err != nil || st.Domains[0].Paused {
		t.Fatalf("paused by a refused request: %+v %v", st, err)
	}

	// alice's session speaks as alice: authz refuses her the owner's views
	// and actions, whatever the dashboard is asked.
	aliceCSRF := b.session(t, alice).CSRF
	if info := b.session(t, alice); info.Operator {
		t.Fatalf("alice is shown as an operator: %+v", info)
	}
	if code, _ := b.call(t, http.MethodPost, "/api/pause", alice, aliceCSRF, body); code != http.StatusForbidden {
		t.Fatalf("alice pauses: %d, want 403", code)
	}
	if code, _ := b.call(t, http.MethodGet, "/api/domains", alice, "", ""); code != http.StatusForbidden {
		t.Fatalf("alice reads the domains: %d, want 403", code)
	}
	id := b.send(t, noop())
	if code, out := b.call(t, http.MethodGet, "/api/list", alice, "", ""); code != http.StatusOK || len(out["items"].([]any)) != 1 {
		t.Fatalf("alice's batches: %d %v", code, out)
	}
	if code, _ := b.call(t, http.MethodGet, "/api/list?limit=x", alice, "", ""); code != http.StatusBadRequest {
		t.Fatalf("a bad limit: %d, want 400", code)
	}
	if code, _ := b.call(t, http.MethodPost, "/api/cancel", alice, aliceCSRF, `{"id":`+jsonNumber(id)+`}`); code != http.StatusOK {
		t.Fatalf("alice cancels hers: %d", code)
	}

	if code, out := b.call(t, http.MethodPost, "/api/pause", owner, csrf, body); code != http.StatusOK || out["paused"] != true {
		t.Fatalf("owner pauses: %d %v", code, out)
	}
	if st, err := b.owner.Pause(b.ctx, api.DomainRequest{Domain: domain}); err != nil || !st.Paused {
		t.Fatalf("pause state: %+v %v", st, err)
	}
}

func jsonNumber(n uint64) string {
	data, _ := json.Marshal(n)
	return string(data)
}
