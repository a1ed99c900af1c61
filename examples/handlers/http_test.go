package handlers_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tickflow/tickflow/examples/handlers"
	"github.com/tickflow/tickflow/pipeline"
)

// post is bob's http.post of url, as a worker hands it to the handler.
func post(url string) *pipeline.Call {
	return &pipeline.Call{BatchID: 3, Submitter: "bob", Label: "jobs", Type: handlers.TypeHTTP,
		Payload: pipeline.MustPayload(handlers.HTTPRequest{URL: url, Body: "x"})}
}

// TestHTTPRefusesDestinations: by default http.post reaches public addresses
// only; the address dialled is checked, so names and redirects that lead to
// a refused address are refused too, permanently, naming the rule.
func TestHTTPRefusesDestinations(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	// An open server that redirects to the one nobody opened.
	redirect := httptest.NewServer(http.RedirectHandler(srv.URL+"/x", http.StatusTemporaryRedirect))
	defer redirect.Close()
	h, err := handlers.NewHTTP(redirect.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, url, rule string
	}{
		{name: "loopback address", url: "http://127.0.0.1:" + port + "/hook", rule: "loopback"},
		{name: "a name that resolves to loopback", url: "http://localhost:" + port + "/hook", rule: "loopback"},
		{name: "IPv4-mapped loopback", url: "http://[::ffff:127.0.0.1]:" + port + "/hook", rule: "loopback"},
		{name: "a redirect to loopback", url: redirect.URL, rule: "loopback"},
		{name: "unspecified", url: "http://0.0.0.0:" + port + "/hook", rule: "unspecified"},
		{name: "link-local (cloud metadata)", url: "http://169.254.169.254/latest/meta-data", rule: "link-local"},
		{name: "private", url: "http://10.1.2.3/hook", rule: "private"},
		{name: "private, another range", url: "http://192.168.1.1/hook", rule: "private"},
		{name: "shared", url: "http://100.64.0.1/hook", rule: "shared"},
		{name: "multicast", url: "http://224.0.0.1/hook", rule: "multicast"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.Handle(context.Background(), post(tt.url))
			if !errors.Is(err, handlers.ErrDestination) || !pipeline.IsPermanent(err) {
				t.Fatalf("err %v, want a permanent %v", err, handlers.ErrDestination)
			}
			if !strings.Contains(err.Error(), tt.rule) {
				t.Fatalf("error %q does not name the rule %q", err, tt.rule)
			}
			if codes := pipeline.Codes(err); len(codes) == 0 || codes[0] != "http.destination" {
				t.Fatalf("codes %v, want http.destination", codes)
			}
		})
	}
}

// TestHTTPAllowList: each kind of allow entry opens what it names, and
// nothing else.
func TestHTTPAllowList(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer other.Close()
	tests := []struct {
		name       string
		allow      []string
		otherOpens bool // whether the other loopback server is reachable too
	}{
		{name: "address and port", allow: []string{addr}},
		{name: "address", allow: []string{"127.0.0.1"}, otherOpens: true},
		{name: "prefix", allow: []string{"127.0.0.0/8"}, otherOpens: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := handlers.NewHTTP(tt.allow...)
			if err != nil {
				t.Fatal(err)
			}
			before := hits.Load()
			if _, err := h.Handle(context.Background(), post(srv.URL)); err != nil || hits.Load() != before+1 {
				t.Fatalf("opened destination: err %v, %d requests", err, hits.Load()-before)
			}
			_, err = h.Handle(context.Background(), post(other.URL))
			if tt.otherOpens != (err == nil) || !tt.otherOpens && !errors.Is(err, handlers.ErrDestination) {
				t.Fatalf("another loopback port: err %v, want open %v", err, tt.otherOpens)
			}
		})
	}
	for _, bad := range []string{"localhost", "10.0.0.0/33", "127.0.0.1:http", ""} {
		if _, err := handlers.NewHTTP(bad); !errors.Is(err, handlers.ErrAllowEntry) {
			t.Errorf("allow entry %q: err %v, want %v", bad, err, handlers.ErrAllowEntry)
		}
	}
}
