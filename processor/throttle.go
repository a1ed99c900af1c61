package processor

import (
	"context"
	"time"

	"github.com/tickflow/tickflow/internal/streams"
)

// throttle caps the steps a domain takes per second across all its
// replicas: before each fetch a tick takes as many steps as it wants from
// the second's shared budget (streams.ThrottleStore, in the locks bucket),
// and gives back what it did not fetch. A nil throttle lets everything
// through.
type throttle struct {
	store  *streams.ThrottleStore
	domain string
	limit  int
	now    func() time.Time
}

// take grants up to n steps now; 0 when the second's budget is spent.
// Without a throttle it grants n.
func (t *throttle) take(ctx context.Context, n int) (granted int, second int64, err error) {
	if t == nil {
		return n, 0, nil
	}
	return t.store.Take(ctx, t.domain, t.limit, n)
}

// giveBack returns n unused steps of second's grant.
func (t *throttle) giveBack(ctx context.Context, second int64, n int) error {
	if t == nil || n <= 0 {
		return nil
	}
	return t.store.GiveBack(ctx, t.domain, second, n)
}

// untilNext is how long until the next second's budget opens.
func (t *throttle) untilNext() time.Duration {
	if t == nil {
		return 0
	}
	now := t.now()
	return now.Truncate(time.Second).Add(time.Second).Sub(now)
}
