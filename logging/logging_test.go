package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNewFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		format   string
		wantJSON bool
	}{
		{name: "auto to a buffer is JSON", format: "auto", wantJSON: true},
		{name: "empty means auto", format: "", wantJSON: true},
		{name: "json", format: "json", wantJSON: true},
		{name: "json any case", format: "JSON", wantJSON: true},
		{name: "text is tint", format: "text", wantJSON: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := New(&buf, tt.format, "info")
			if err != nil {
				t.Fatal(err)
			}
			log.Info("started", "batch_id", 42)
			line := buf.String()
			var rec map[string]any
			isJSON := json.Unmarshal([]byte(line), &rec) == nil
			if isJSON != tt.wantJSON {
				t.Fatalf("JSON = %v, want %v: %q", isJSON, tt.wantJSON, line)
			}
			if !strings.Contains(line, "started") || !strings.Contains(line, "batch_id") {
				t.Fatalf("line lacks message or attribute: %q", line)
			}
			if strings.Contains(line, "\x1b[") {
				t.Fatalf("colour written to a non-terminal: %q", line)
			}
		})
	}
}

func TestNewAutoOnRegularFileIsJSON(t *testing.T) {
	t.Parallel()
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	log, err := New(f, "auto", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "domain", "payments")
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatalf("not JSON: %q: %v", b, err)
	}
	if rec["domain"] != "payments" || rec["msg"] != "hello" {
		t.Fatalf("record = %v", rec)
	}
}

func TestNewLevel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		level string
		want  []string // messages that must appear, in order
	}{
		{name: "debug shows all", level: "debug", want: []string{"d", "i", "w", "e"}},
		{name: "empty is info", level: "", want: []string{"i", "w", "e"}},
		{name: "info", level: "info", want: []string{"i", "w", "e"}},
		{name: "warn any case", level: "WARN", want: []string{"w", "e"}},
		{name: "error", level: "error", want: []string{"e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			log, err := New(&buf, "json", tt.level)
			if err != nil {
				t.Fatal(err)
			}
			log.Debug("d")
			log.Info("i")
			log.Warn("w")
			log.Error("e")
			var got []string
			dec := json.NewDecoder(&buf)
			for dec.More() {
				var rec struct{ Msg string }
				if err := dec.Decode(&rec); err != nil {
					t.Fatal(err)
				}
				got = append(got, rec.Msg)
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Fatalf("logged %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		format, level string
		want          error
	}{
		{name: "bad format", format: "xml", level: "info", want: ErrFormat},
		{name: "bad level", format: "json", level: "verbose", want: ErrLevel},
		{name: "slog offsets refused", format: "json", level: "info+2", want: ErrLevel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log, err := New(&bytes.Buffer{}, tt.format, tt.level)
			if !errors.Is(err, tt.want) || log != nil {
				t.Fatalf("New = %v, %v; want error matching %v", log, err, tt.want)
			}
		})
	}
}
