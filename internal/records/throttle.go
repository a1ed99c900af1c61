package records

import (
	"encoding/json"
	"fmt"
)

// ThrottleWindow is the value of a domain's throttle key: how many steps
// the domain's replicas took in one second of the clock, against the limit
// the last replica to take some was given. It is JSON, so `nats kv get
// locks throttle.<domain>` is legible.
type ThrottleWindow struct {
	// Limit is the steps per second allowed, as the last writer was told.
	Limit int `json:"steps_per_second"`
	// Second is the window: a Unix time in seconds.
	Second int64 `json:"second"`
	// Used is how many steps were granted in that second.
	Used int `json:"used"`
}

// DecodeThrottleWindow reads a throttle key's value.
func DecodeThrottleWindow(b []byte) (ThrottleWindow, error) {
	var w ThrottleWindow
	if err := json.Unmarshal(b, &w); err != nil {
		return w, fmt.Errorf("%w throttle window %q: %w", ErrDecode, b, err)
	}
	return w, nil
}
