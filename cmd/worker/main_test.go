package main

import (
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/tickflow/tickflow/config"
	"github.com/tickflow/tickflow/worker"
)

// TestOptionsPassEveryKnob: every worker setting of the config reaches
// worker.Options.
func TestOptionsPassEveryKnob(t *testing.T) {
	cfg := config.DefaultWorker()
	cfg.Name, cfg.Concurrency, cfg.RecordWindow = "w-1", 3, 5*time.Minute
	cfg.Senders = []string{"chain/s1=env:S1_KEY"}
	log := slog.New(slog.DiscardHandler)
	want := worker.Options{Name: "w-1", Concurrency: 3, RecordWindow: 5 * time.Minute, Logger: log,
		Senders: map[string]map[string]string{"chain": {"s1": "env:S1_KEY"}}}
	if got := options(cfg, log); !reflect.DeepEqual(got, want) {
		t.Fatalf("options = %+v, want %+v", got, want)
	}
}
