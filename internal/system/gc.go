package system

import (
	"os"
	"runtime/debug"
)

// Garbage collector defaults of the single-process mode (TuneGC).
const (
	// GCPercent is GOGC's default there: the heap may grow to five times
	// what is live before a collection, instead of twice. Server, authz,
	// processors and workers share one heap, and with the default
	// collections came every few hundred milliseconds, each a concurrent
	// mark that takes a share of the cores and stretches the tail of the
	// latency.
	GCPercent = 400
	// MemoryLimit is GOMEMLIMIT's default there: past it the collector
	// runs as often as it must to stay under, whatever GCPercent says, so
	// the larger GCPercent cannot let a large live heap grow fivefold.
	MemoryLimit = 1 << 30
)

// TuneGC sets GCPercent and MemoryLimit, each unless its environment
// variable (GOGC, GOMEMLIMIT) says otherwise, for a process that runs the
// whole system in one heap (tickflow run, and the benchmark that measures
// it).
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(GCPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(MemoryLimit)
	}
}
