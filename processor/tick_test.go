package processor_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/processor"
)

func TestParseTick(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		want    int
		wantErr string
	}{
		{name: "empty", body: "", want: 1},
		{name: "blank", body: " \n", want: 1},
		{name: "number", body: "4", want: 4},
		{name: "json", body: `{"steps": 3}`, want: 3},
		{name: "zero", body: "0", wantErr: "≥ 1"},
		{name: "negative", body: "-2", wantErr: "≥ 1"},
		{name: "words", body: "many", wantErr: "expected a step count"},
		{name: "bad json", body: `{"steps":`, wantErr: "expected a step count"},
		{name: "huge", body: strings.Repeat("9", 900<<10), wantErr: "921600 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := processor.ParseTick([]byte(tt.body))
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseTick(%q) = %d, %v; want %d", tt.body, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseTick = %d, %v; want an error containing %q", got, err, tt.wantErr)
			}
			if len(err.Error()) > 200 {
				t.Errorf("the error echoes the body: %d bytes", len(err.Error()))
			}
		})
	}
}

// TestUntrustedTicksAreNotEchoed: anonymous 900 KB tick bodies and reply
// subjects cost a capped log line each, not their size.
func TestUntrustedTicksAreNotEchoed(t *testing.T) {
	env := testnats.Start(t, []string{domain})
	var logs testnats.LogBuffer
	ctx, cancel := context.WithCancel(context.Background())
	p, err := processor.New(ctx, env.Conn(t, "processor"), processor.Options{Domain: domain,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testnats.Eventually(t, 10*time.Second, "the processor to serve", func() bool {
		return strings.Contains(logs.String(), "processor serving")
	})
	anyone, err := streams.Connect(streams.Credentials{Name: "anonymous"}, env.Server.InProcess())
	if err != nil {
		t.Fatal(err)
	}
	defer anyone.Close()
	big := bytes.Repeat([]byte("x"), 900<<10)
	const n = 20
	for range n {
		if err := anyone.Publish(streams.TickSubject(domain), big); err != nil {
			t.Fatal(err)
		}
		if err := anyone.PublishRequest(streams.TickSubject(domain), "$KV.progress."+strings.Repeat("k", 4000), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := anyone.Flush(); err != nil {
		t.Fatal(err)
	}
	testnats.Eventually(t, 10*time.Second, "every tick to be logged", func() bool {
		s := logs.String()
		return strings.Count(s, "bad tick") == n && strings.Count(s, streams.LogReplyRefused) == n
	})
	if size := len(logs.String()); size > n*2*600 {
		t.Fatalf("%d ticks wrote %d bytes of log", 2*n, size)
	}
}
