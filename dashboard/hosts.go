package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tickflow/tickflow/logging"
)

// hostEntry is one of Config.Hosts: a name or IP address (IPv6 without
// brackets), lower case, and a port, "" for any.
type hostEntry struct{ name, port string }

// parseHosts checks Config.Hosts.
func parseHosts(hosts []string) ([]hostEntry, error) {
	out := make([]hostEntry, 0, len(hosts))
	for _, h := range hosts {
		name, port, ok := splitHost(strings.ToLower(h))
		if ok && port != "" {
			n, err := strconv.Atoi(port)
			ok = err == nil && n > 0 && n < 1<<16
		}
		if !ok || !validHostName(name) {
			return nil, fmt.Errorf("%w: Hosts entry %q: expected a host as a browser writes it in the Host header: a name or IP address, with or without a port (dash.lan, dash.lan:8090, [::1]:8090)", ErrConfig, h)
		}
		out = append(out, hostEntry{name: name, port: port})
	}
	return out, nil
}

// validHostName says whether name (IPv6 without its brackets) is an IP
// address or a DNS name: dot-separated labels of letters, digits and
// hyphens.
func validHostName(name string) bool {
	if _, err := netip.ParseAddr(name); err == nil {
		return !strings.Contains(name, "%")
	}
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range label {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	return true
}

// splitHost splits a Host header's value into its name (an IPv6 address
// without its brackets) and port ("" when none); ok false when it is not
// of that form.
func splitHost(host string) (name, port string, ok bool) {
	if rest, found := strings.CutPrefix(host, "["); found {
		name, rest, found = strings.Cut(rest, "]")
		if !found {
			return "", "", false
		}
		if ip, err := netip.ParseAddr(name); err != nil || !ip.Is6() {
			return "", "", false
		}
		if rest == "" {
			return name, "", true
		}
		port, found = strings.CutPrefix(rest, ":")
		return name, port, found && port != ""
	}
	name, port, found := strings.Cut(host, ":")
	if found && (port == "" || strings.Contains(port, ":")) {
		return "", "", false
	}
	return name, port, true
}

// allowedHost says whether the dashboard answers to the request's Host:
// the address the request reached (as its server puts it in the
// request's context) or localhost, at that address's port; PublicURL's
// host; or one of Hosts. Any other name may be one an attacker's DNS
// points at the dashboard, for a page of the attacker's to use it.
func (s *Server) allowedHost(r *http.Request) bool {
	host := strings.ToLower(r.Host)
	if s.public != "" && (host == s.public || host == s.public+":443") {
		return true
	}
	name, port, ok := splitHost(host)
	if !ok {
		return false
	}
	for _, h := range s.hosts {
		if h.name == name && (h.port == "" || h.port == port) {
			return true
		}
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return false
	}
	ap, err := netip.ParseAddrPort(local.String())
	if err != nil {
		return false
	}
	localPort := strconv.Itoa(int(ap.Port()))
	if port == "" {
		// The scheme's default port, which a browser leaves out.
		port = "80"
		if r.TLS != nil {
			port = "443"
		}
	}
	if port != localPort {
		return false
	}
	if name == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(name)
	return err == nil && ip == ap.Addr().Unmap().WithZone("")
}

// hostGate refuses, before anything else, a request for a host the
// dashboard does not answer to (allowedHost).
func (s *Server) hostGate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.allowedHost(r) {
			s.log.Debug("dashboard request for another host refused", "host", logging.Capped(r.Host), "path", logging.Capped(r.URL.Path))
			writeError(w, http.StatusMisdirectedRequest, "this dashboard does not answer to this host name: reach it at the address it listens on, at localhost, or at a host it is configured to answer to")
			return
		}
		next.ServeHTTP(w, r)
	})
}
