package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// publicOrigin checks Config.PublicURL and returns its origin as a browser
// writes it in an Origin header (scheme and host, lower case, no default
// port); "" when unset.
func publicOrigin(public string) (string, error) {
	if public == "" {
		return "", nil
	}
	u, err := url.Parse(public)
	if err != nil {
		return "", fmt.Errorf("%w: PublicURL %q: %v", ErrConfig, public, err)
	}
	if u.Scheme != "https" || u.Host == "" || u.User != nil || u.Opaque != "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%w: PublicURL %q: expected the https origin the browser uses, as https://host or https://host:port, with no path", ErrConfig, public)
	}
	host := strings.ToLower(u.Host)
	if u.Port() == "443" {
		host = strings.ToLower(u.Hostname())
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	return "https://" + host, nil
}

// secure says whether the session cookie must be Secure: always where the
// dashboard is served over https through PublicURL, else when the request
// came over TLS to the dashboard itself.
func (s *Server) secure(r *http.Request) bool { return s.origin != "" || r.TLS != nil }

// sameOrigin holds unless the browser says the request came from
// elsewhere: Sec-Fetch-Site decides where the browser sends it; else an
// Origin, when there is one, must be PublicURL's origin, or without it the
// request's host.
func (s *Server) sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin":
		return true
	case "":
	default: // cross-site, same-site (another port or subdomain), none
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	if s.origin != "" {
		return strings.EqualFold(o, s.origin)
	}
	rest, ok := strings.CutPrefix(o, "http://")
	if !ok {
		rest, ok = strings.CutPrefix(o, "https://")
	}
	return ok && rest == r.Host
}
