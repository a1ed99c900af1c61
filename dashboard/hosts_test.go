package dashboard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/tickflow/tickflow/dashboard"
)

// port is the port of the bundle's dashboard.
func (b *bundle) port() string { return b.url[strings.LastIndex(b.url, ":")+1:] }

// TestHostAllowList: a page of another name that resolves to the
// dashboard's address (DNS rebinding) can neither log in nor read: every
// request whose Host is not the address the dashboard listens on or
// localhost, at its port, is refused before anything else; a POST from an
// origin other than the allowed host is refused too.
func TestHostAllowList(t *testing.T) {
	b := setup(t)
	port := b.port()
	rebind := "rebind.attacker.test:" + port
	if resp, c := b.loginWith(t, "owner", "local-owner", "Host", rebind, "Origin", "http://"+rebind); c != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a login through a rebound name: %d, cookie %v; want 421 and none", resp.StatusCode, c != nil)
	}
	_, owner := b.login(t, "owner", "local-owner")
	if owner == nil {
		t.Fatal("the owner's login failed")
	}
	if code, out := b.call(t, http.MethodGet, "/api/domains", owner, "", "", "Host", rebind); code != http.StatusMisdirectedRequest {
		t.Fatalf("a read through a rebound name, with the session: %d %v, want 421", code, out)
	}
	for _, c := range []struct {
		name, host string
		want       int
	}{
		{name: "the address it listens on", host: "127.0.0.1:" + port, want: http.StatusOK},
		{name: "localhost", host: "localhost:" + port, want: http.StatusOK},
		{name: "localhost in capitals", host: "LocalHost:" + port, want: http.StatusOK},
		{name: "localhost on another port", host: "localhost:1", want: http.StatusMisdirectedRequest},
		{name: "the address without its port", host: "127.0.0.1", want: http.StatusMisdirectedRequest},
		{name: "another loopback address", host: "127.0.0.2:" + port, want: http.StatusMisdirectedRequest},
		{name: "an address not listened on", host: "[::1]:" + port, want: http.StatusMisdirectedRequest},
		{name: "a name of another site", host: rebind, want: http.StatusMisdirectedRequest},
		{name: "localhost under another site", host: "localhost.attacker.test:" + port, want: http.StatusMisdirectedRequest},
		{name: "localhost with a trailing dot", host: "localhost.:" + port, want: http.StatusMisdirectedRequest},
	} {
		if code, out := b.call(t, http.MethodGet, "/api/domains", owner, "", "", "Host", c.host); code != c.want {
			t.Errorf("%s (Host %q): %d %v, want %d", c.name, c.host, code, out, c.want)
		}
	}
	csrf := b.session(t, owner).CSRF
	if code, _ := b.call(t, http.MethodPost, "/api/pause", owner, csrf, `{"domain":"pay"}`, "Origin", "http://"+rebind); code != http.StatusForbidden {
		t.Fatalf("a POST from a rebound name's origin: %d, want 403", code)
	}
	if resp, c := b.loginWith(t, "owner", "local-owner", "Origin", "http://"+rebind); c != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a login from a rebound name's origin: %d, cookie %v; want 403", resp.StatusCode, c != nil)
	}
	if resp, c := b.loginWith(t, "owner", "local-owner", "Host", "localhost:"+port, "Origin", "http://localhost:"+port); c == nil {
		t.Fatalf("a login at localhost: %d", resp.StatusCode)
	}
}

// TestHosts: Config.Hosts adds names the dashboard answers to, with any
// port or the one given; PublicURL adds its host.
func TestHosts(t *testing.T) {
	b := setup(t, func(c *dashboard.Config) {
		c.Hosts = []string{"Dash.LAN", "tickflow.lan:9000"}
		c.PublicURL = "https://dash.example.com:8443"
	})
	port := b.port()
	for _, c := range []struct {
		host string
		want int
	}{
		{host: "dash.lan:" + port, want: http.StatusOK},
		{host: "dash.lan", want: http.StatusOK},
		{host: "tickflow.lan:9000", want: http.StatusOK},
		{host: "tickflow.lan:" + port, want: http.StatusMisdirectedRequest},
		{host: "dash.example.com:8443", want: http.StatusOK},
		{host: "dash.example.com", want: http.StatusMisdirectedRequest},
		{host: "127.0.0.1:" + port, want: http.StatusOK},
		{host: "other.lan:" + port, want: http.StatusMisdirectedRequest},
	} {
		if code, _ := b.call(t, http.MethodGet, "/login", nil, "", "", "Host", c.host); code != c.want {
			t.Errorf("Host %q: %d, want %d", c.host, code, c.want)
		}
	}
	for _, bad := range []string{"", "http://dash.lan", "dash.lan/x", "dash.lan:port", "dash lan", "user@dash.lan", "dash.lan:99999"} {
		_, err := dashboard.New(dashboard.Config{Dial: func(string, string) (*nats.Conn, error) { return nil, nil }, Hosts: []string{bad}})
		if !errors.Is(err, dashboard.ErrConfig) {
			t.Errorf("Hosts [%q]: %v, want ErrConfig", bad, err)
		}
	}
}

// TestHostsOnEveryAddress: a dashboard listening on every address answers
// to the address each request reached it at, and to localhost, at its
// port; not to a name.
func TestHostsOnEveryAddress(t *testing.T) {
	dash, err := dashboard.New(dashboard.Config{Dial: func(string, string) (*nats.Conn, error) {
		return nil, errors.New("no login in this test")
	}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dash.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	get := func(addr, host string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/login", nil)
		req.Host = host
		resp, err := browserless.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	loop := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, c := range []struct {
		host string
		want int
	}{
		{host: loop, want: http.StatusOK},
		{host: "localhost:" + strconv.Itoa(port), want: http.StatusOK},
		{host: "rebind.attacker.test:" + strconv.Itoa(port), want: http.StatusMisdirectedRequest},
		{host: "0.0.0.0:" + strconv.Itoa(port), want: http.StatusMisdirectedRequest},
	} {
		if code := get(loop, c.host); code != c.want {
			t.Errorf("through 127.0.0.1, Host %q: %d, want %d", c.host, code, c.want)
		}
	}
	// One of the machine's own addresses other than loopback, where it has one.
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.IsLoopback() || ip.IP.To4() == nil || ip.IP.IsLinkLocalUnicast() {
			continue
		}
		own := net.JoinHostPort(ip.IP.String(), strconv.Itoa(port))
		if code := get(own, own); code != http.StatusOK {
			t.Errorf("through %s, Host %q: %d, want 200", own, own, code)
		}
		if code := get(own, loop); code != http.StatusMisdirectedRequest {
			t.Errorf("through %s, Host %q: %d, want 421", own, loop, code)
		}
		break
	}
}
