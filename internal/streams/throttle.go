package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
)

// ThrottleKey is the locks-bucket key of domain's throttle: the steps its
// processors took in the current second, shared by every replica.
func ThrottleKey(domain string) string { return "throttle." + domain }

// ThrottleStore keeps the per-second step budgets of domains in the locks
// bucket, with compare-and-set, so that every replica of a domain draws
// from one budget and a restarted replica finds what the second has spent.
type ThrottleStore struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// NewThrottleStore returns the store over kv (the locks bucket), reading
// the time from now.
func NewThrottleStore(kv jetstream.KeyValue, now func() time.Time) *ThrottleStore {
	return &ThrottleStore{kv: kv, now: now}
}

// Take grants up to n steps of domain's budget of limit steps in the
// current second and returns how many, with the second they count in (to
// give back what goes unused). A window written by a replica whose clock is
// ahead counts as the current one until this clock passes it. It writes
// nothing and grants 0 when the second's budget is spent.
func (s *ThrottleStore) Take(ctx context.Context, domain string, limit, n int) (granted int, second int64, err error) {
	_, err = UpdateKV(ctx, s.kv, ThrottleKey(domain), func(cur []byte, exists bool) ([]byte, error) {
		granted, second = 0, s.now().Unix()
		var w records.ThrottleWindow
		if exists {
			var err error
			if w, err = records.DecodeThrottleWindow(cur); err != nil {
				// A value that does not decode is overwritten by a fresh window.
				w = records.ThrottleWindow{}
			}
		}
		if w.Second < second {
			w = records.ThrottleWindow{Second: second}
		}
		second = w.Second
		granted = min(n, limit-w.Used)
		if granted <= 0 {
			granted = 0
			return nil, nil
		}
		w.Used += granted
		w.Limit = limit
		return json.Marshal(w)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("streams: take from the throttle of %s: %w", domain, err)
	}
	return granted, second, nil
}

// GiveBack returns n steps granted in second to domain's budget, when that
// second is still the current window: a tick that took fewer tokens than it
// was granted leaves them to the other replicas.
func (s *ThrottleStore) GiveBack(ctx context.Context, domain string, second int64, n int) error {
	if n <= 0 {
		return nil
	}
	_, err := UpdateKV(ctx, s.kv, ThrottleKey(domain), func(cur []byte, exists bool) ([]byte, error) {
		if !exists {
			return nil, nil
		}
		w, err := records.DecodeThrottleWindow(cur)
		if err != nil || w.Second != second || w.Used == 0 {
			return nil, nil
		}
		w.Used = max(0, w.Used-n)
		return json.Marshal(w)
	})
	if err != nil {
		return fmt.Errorf("streams: give back to the throttle of %s: %w", domain, err)
	}
	return nil
}

// Window reads domain's current throttle window; ok is false when no
// replica has taken from it.
func (s *ThrottleStore) Window(ctx context.Context, domain string) (w records.ThrottleWindow, ok bool, err error) {
	e, err := s.kv.Get(ctx, ThrottleKey(domain))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return w, false, nil
	}
	if err != nil {
		return w, false, err
	}
	w, err = records.DecodeThrottleWindow(e.Value())
	return w, err == nil, err
}
