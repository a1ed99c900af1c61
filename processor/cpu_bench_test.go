package processor_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/tickflow/tickflow/processor"
)

// processCPU is the CPU time the process has used, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTickNoopAtomic32CPU is BenchmarkTickNoopAtomic32 reporting the
// CPU time the whole process (server, worker and processor together) spends
// per step: on a shared machine that figure moves less with other load than
// the wall time does.
func BenchmarkTickNoopAtomic32CPU(b *testing.B) {
	const steps = 32
	e := benchSetup(b, processor.Options{Concurrency: steps, MaxSteps: steps})
	e.enqueueNoops(b, b.N+steps)
	b.ReportAllocs()
	b.ResetTimer()
	start := processCPU(b)
	for done := 0; done < b.N; {
		rep := e.p.Tick(e.ctx, min(steps, b.N-done))
		if len(rep.Steps) == 0 {
			b.Fatalf("tick: %+v", rep)
		}
		for _, s := range rep.Steps {
			if s.Action != "finished" {
				b.Fatalf("step: %+v", s)
			}
		}
		done += len(rep.Steps)
	}
	b.ReportMetric(float64((processCPU(b)-start).Microseconds())/float64(b.N), "cpu-µs/op")
}
