package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestResolvePrecedence: each setting comes from its flag, else its
// environment variable, else the nats context, else the default, as the
// nats tool takes them; and the sources are named.
func TestResolvePrecedence(t *testing.T) {
	xdg := t.TempDir()
	writeContext(t, xdg, "ctx", `{"url":"nats://ctx:4222","user":"alice","password":"pw-ctx"}`)
	tests := []struct {
		name     string
		flags    Connection
		env      map[string]string
		url, as  string
		password string
		timeout  time.Duration
		from     string
		err      string
	}{
		{name: "defaults", env: map[string]string{"NATS_USER": "bob"}, url: "nats://127.0.0.1:4222", as: "bob", from: "user from NATS_USER"},
		{name: "the context", env: map[string]string{"NATS_CONTEXT": "ctx"}, url: "nats://ctx:4222", as: "alice", password: "pw-ctx",
			from: `server from nats context "ctx", user from nats context "ctx", password from nats context "ctx"`},
		{name: "the environment over the context", env: map[string]string{"NATS_CONTEXT": "ctx", "NATS_URL": "nats://env:4222", "NATS_PASSWORD": "pw-env"},
			url: "nats://env:4222", as: "alice", password: "pw-env", from: `server from NATS_URL, user from nats context "ctx", password from NATS_PASSWORD`},
		{name: "a flag over the environment", flags: Connection{Server: "nats://flag:4222", User: "carol", Context: "ctx", Timeout: time.Second},
			env: map[string]string{"NATS_URL": "nats://env:4222", "NATS_USER": "bob", "NATS_TIMEOUT": "3s"}, url: "nats://flag:4222", as: "carol", password: "pw-ctx", timeout: time.Second,
			from: `server from --server, user from --user, password from nats context "ctx"`},
		{name: "--as names the user of a creds connection", flags: Connection{As: "dave", Creds: "/x.creds"}, env: map[string]string{"NATS_TIMEOUT": "3s"},
			url: "nats://127.0.0.1:4222", as: "dave", timeout: 3 * time.Second, from: "creds from --creds, as from --as"},
		{name: "--as is not another user", flags: Connection{As: "dave"}, env: map[string]string{"NATS_USER": "bob"}, err: `speaking as "dave" (--as) over a connection made as user "bob"`},
		{name: "two ways of authenticating", flags: Connection{Creds: "/x.creds"}, env: map[string]string{"NATS_CONTEXT": "ctx"},
			err: `creds: must not be set together with user: choose one of user/password, creds or nkey (server from nats context "ctx", user from nats context "ctx", password from nats context "ctx", creds from --creds)`},
		{name: "a creds file needs --as", flags: Connection{Creds: "/x.creds"}, err: "no tickflow user"},
		{name: "a bad NATS_TIMEOUT", env: map[string]string{"NATS_USER": "bob", "NATS_TIMEOUT": "soon"}, err: `NATS_TIMEOUT "soon"`},
		{name: "a user that is no subject token", env: map[string]string{"NATS_USER": "a.b"}, err: `tickflow user "a.b"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"XDG_CONFIG_HOME": xdg}
			for k, v := range tt.env {
				env[k] = v
			}
			s, err := tt.flags.resolve(func(k string) string { return env[k] })
			if tt.err != "" {
				if err == nil || !errors.Is(err, errSettings) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err %v, want errSettings saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.nats.ServerURL() != tt.url || s.as != tt.as || s.nats.Password != tt.password || s.timeout != tt.timeout || s.sources() != tt.from {
				t.Fatalf("got url %q as %q password %q timeout %v from %q\nwant url %q as %q password %q timeout %v from %q",
					s.nats.ServerURL(), s.as, s.nats.Password, s.timeout, s.sources(), tt.url, tt.as, tt.password, tt.timeout, tt.from)
			}
		})
	}
}
