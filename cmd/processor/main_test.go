package main

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/processor"
)

// TestOptionsPassEveryKnob: every processor setting of the config reaches
// processor.Options.
func TestOptionsPassEveryKnob(t *testing.T) {
	cfg := config.DefaultProcessor()
	cfg.Name, cfg.Concurrency, cfg.MaxSteps = "p-1", 3, 7
	cfg.WorkTimeout, cfg.MaxWait, cfg.PoisonRetries = 2*time.Second, 3*time.Minute, 4
	cfg.Pace, cfg.IdleWait, cfg.Throttle = "tick", 5*time.Second, 200
	log := slog.New(slog.DiscardHandler)
	got := options(cfg, "payments", log)
	want := processor.Options{Domain: "payments", Name: "p-1", Concurrency: 3, MaxSteps: 7,
		WorkTimeout: 2 * time.Second, MaxWait: 3 * time.Minute, PoisonRetries: 4, Logger: log,
		Pace: processor.PaceTick, IdleWait: 5 * time.Second, Throttle: 200}
	if got.Domain != want.Domain || got.Name != want.Name || got.Concurrency != want.Concurrency ||
		got.MaxSteps != want.MaxSteps || got.WorkTimeout != want.WorkTimeout || got.MaxWait != want.MaxWait ||
		got.PoisonRetries != want.PoisonRetries || got.Logger != want.Logger ||
		got.Pace != want.Pace || got.IdleWait != want.IdleWait || got.Throttle != want.Throttle {
		t.Fatalf("options = %+v, want %+v", got, want)
	}
	cfg.Senders = []string{"payments/s1", "chain/s9", "payments/s2"}
	if got := options(cfg, "payments", log).Senders; len(got) != 2 || got[0] != "s1" || got[1] != "s2" {
		t.Fatalf("senders %v, want [s1 s2]: the domain's, in order", got)
	}
}
