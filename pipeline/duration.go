package pipeline

import (
	"fmt"
	"time"
)

// Duration is a time.Duration that reads and writes as text ("1.5s",
// "250ms") in JSON and msgpack, so a person can type it with `nats req`.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d as time.Duration does.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText encodes d as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText parses a Go duration string such as "500ms" or "2m".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("pipeline: duration %q: expected a Go duration such as \"500ms\" or \"2m\"", b)
	}
	*d = Duration(v)
	return nil
}
