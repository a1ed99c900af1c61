package config

import (
	"testing"

	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/processor"
	"github.com/tickflow/tickflow/worker"
)

// TestDefaultsAreThePackages: a command configured with nothing runs its
// component exactly as the component's zero Options would, so the numbers
// documented in one place hold in the other. Names differ on purpose:
// every replica gets <hostname>-<pid>.
func TestDefaultsAreThePackages(t *testing.T) {
	t.Parallel()
	p, w, a, tk := DefaultProcessor(), DefaultWorker(), DefaultAuthz(), DefaultTick()
	tests := []struct {
		name      string
		got, want any
	}{
		{"processor.concurrency", p.Concurrency, processor.DefaultConcurrency},
		{"processor.max_steps", p.MaxSteps, processor.DefaultMaxSteps},
		{"processor.work_timeout", p.WorkTimeout, processor.DefaultWorkTimeout},
		{"processor.max_wait", p.MaxWait, processor.DefaultMaxWait},
		{"processor.poison_retries", p.PoisonRetries, processor.DefaultPoisonRetries},
		{"processor.pace", p.Pace, string(processor.PaceReady)},
		{"processor.idle_wait", p.IdleWait, processor.DefaultIdleWait},
		{"processor.throttle", p.Throttle, 0},
		{"tick.steps", tk.Steps, processor.DefaultMaxSteps},
		{"worker.concurrency", w.Concurrency, worker.DefaultConcurrency},
		{"worker.record_window", w.RecordWindow, worker.DefaultRecordWindow},
		{"authz.owner", a.Owner, authz.DefaultOwner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Fatalf("config default %v, package default %v", tt.got, tt.want)
			}
		})
	}
}
