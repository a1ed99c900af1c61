package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Resources are the JetStream resources a component needs to do its work.
type Resources struct {
	// Streams are stream names.
	Streams []string
	// Buckets are key-value bucket names.
	Buckets []string
	// Consumers are durable consumers, each named by its stream and its name.
	Consumers []Consumer
}

// Consumer names a durable consumer.
type Consumer struct{ Stream, Name string }

// check is one readiness check: a component's connection and resources.
type check struct {
	name string
	nc   *nats.Conn
	js   jetstream.JetStream
	need Resources
}

// readyResult is the outcome of the last round of checks, reused for CacheTTL.
type readyResult struct {
	at   time.Time
	errs []error
}

// AddReadiness makes /readyz answer ready only while nc is connected and
// every resource in need exists, as far as nc's user can see: the
// component called name needs them. Checks are run at most once per
// CacheTTL, each round bounded by FetchTimeout.
func (t *Telemetry) AddReadiness(name string, nc *nats.Conn, need Resources) {
	if t == nil {
		return
	}
	js, err := jetstream.New(nc)
	t.readyMu.Lock()
	defer t.readyMu.Unlock()
	if err != nil {
		// Only a nil connection fails here; the check then says so.
		js = nil
	}
	t.checks = append(t.checks, check{name: name, nc: nc, js: js, need: need})
	t.ready.at = time.Time{}
}

// Ready runs the readiness checks (or reuses the last round's result,
// younger than CacheTTL) and returns each failure, wrapping ErrNotReady and
// naming its component; nil means ready. A Telemetry without checks is
// ready: the process is up.
func (t *Telemetry) Ready(ctx context.Context) []error {
	if t == nil {
		return nil
	}
	t.readyMu.Lock()
	defer t.readyMu.Unlock()
	if !t.ready.at.IsZero() && time.Since(t.ready.at) < t.opts.CacheTTL {
		return t.ready.errs
	}
	ctx, cancel := context.WithTimeout(ctx, t.opts.FetchTimeout)
	defer cancel()
	var errs []error
	for _, c := range t.checks {
		if err := c.run(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%w: %s: %w", ErrNotReady, c.name, err))
		}
	}
	t.ready = readyResult{at: time.Now(), errs: errs}
	return errs
}

// errDisconnected says a component's connection is not up.
var errDisconnected = errors.New("not connected to NATS")

func (c *check) run(ctx context.Context) error {
	if c.nc == nil || c.js == nil || !c.nc.IsConnected() {
		if c.nc != nil {
			return fmt.Errorf("%w (connection %s)", errDisconnected, c.nc.Status())
		}
		return errDisconnected
	}
	for _, s := range c.need.Streams {
		if _, err := c.js.Stream(ctx, s); err != nil {
			return fmt.Errorf("stream %s: %w", s, err)
		}
	}
	for _, b := range c.need.Buckets {
		if _, err := c.js.KeyValue(ctx, b); err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	for _, k := range c.need.Consumers {
		if _, err := c.js.Consumer(ctx, k.Stream, k.Name); err != nil {
			return fmt.Errorf("consumer %s on %s: %w", k.Name, k.Stream, err)
		}
	}
	return nil
}
