package worker

import (
	"testing"
	"time"
)

// SetStopping makes Run call f as it begins to stop, once new requests are
// refused.
func SetStopping(w *Worker, f func()) { w.stopping = f }

// SetRecordLinger sets how long a unit whose run ended waits for the
// request's other units of its group, until the test ends.
func SetRecordLinger(t testing.TB, d time.Duration) {
	old := recordLinger
	recordLinger = d
	t.Cleanup(func() { recordLinger = old })
}
