package worker

// SetStopping makes Run call f as it begins to stop, once new requests are
// refused.
func SetStopping(w *Worker, f func()) { w.stopping = f }
