package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/logging"
)

func TestNATSPasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-s3cret"
	p := validProcessor()
	p.NATS.User, p.NATS.Password = "proc", secret

	logWith := func(format string, attr slog.Attr) string {
		var buf bytes.Buffer
		log, err := logging.New(&buf, format, "info")
		if err != nil {
			t.Fatal(err)
		}
		log.Info("config", attr)
		return buf.String()
	}
	jsonOf := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name     string
		out      string
		redacted bool // the output marks the password as set
	}{
		{name: "slog json nats", out: logWith("json", slog.Any("nats", p.NATS)), redacted: true},
		{name: "slog text nats", out: logWith("text", slog.Any("nats", p.NATS)), redacted: true},
		{name: "slog json processor", out: logWith("json", slog.Any("cfg", p))},
		{name: "slog text processor", out: logWith("text", slog.Any("cfg", p)), redacted: true},
		{name: "fmt %v", out: fmt.Sprintf("%v", p.NATS), redacted: true},
		{name: "fmt %+v processor", out: fmt.Sprintf("%+v", p), redacted: true},
		{name: "fmt %#v", out: fmt.Sprintf("%#v", p.NATS), redacted: true},
		{name: "json", out: jsonOf(p)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if strings.Contains(tt.out, secret) {
				t.Fatalf("password printed: %s", tt.out)
			}
			if !strings.Contains(tt.out, "proc") {
				t.Fatalf("user missing, so the test proves nothing: %s", tt.out)
			}
			if tt.redacted && !strings.Contains(tt.out, "[REDACTED]") {
				t.Fatalf("no [REDACTED] marker: %s", tt.out)
			}
		})
	}
}

func TestNATSLogValueOmitsUnsetPassword(t *testing.T) {
	t.Parallel()
	n := DefaultNATS()
	n.URL = "nats://a:4222"
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "nats", n)
	var rec struct {
		NATS map[string]string `json:"nats"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.NATS["password"]; ok || rec.NATS["url"] != "nats://a:4222" {
		t.Fatalf("nats logged as %v", rec.NATS)
	}
}

func TestNATSServerURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, want string
	}{
		{name: "empty is the default", url: "", want: DefaultNATSURL},
		{name: "set is kept", url: "nats://a:1", want: "nats://a:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := (NATS{URL: tt.url}).ServerURL(); got != tt.want {
				t.Fatalf("ServerURL = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLogLogger(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := Log{Format: "json", Level: "warn"}.Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown"`) {
		t.Fatalf("logged %q", out)
	}
	if _, err := (Log{Format: "auto", Level: "nope"}).Logger(&buf); err == nil {
		t.Fatal("Logger accepted a bad level")
	}
}

func TestRedactURL(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "no credentials", in: "nats://127.0.0.1:4222", want: "nats://127.0.0.1:4222"},
		{name: "password", in: "nats://u:secret@h:4222", want: "nats://u:xxxxx@h:4222"},
		{name: "list", in: "nats://a:1@h1:4222,nats://h2:4222", want: "nats://a:xxxxx@h1:4222,nats://h2:4222"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RedactURL(tt.in); got != tt.want {
				t.Fatalf("RedactURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if s := (NATS{URL: tt.in}).String(); strings.Contains(s, "secret") {
				t.Fatalf("String leaks the password: %s", s)
			}
		})
	}
}
