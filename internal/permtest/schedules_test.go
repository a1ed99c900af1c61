package permtest

import (
	"context"
	"testing"
	"time"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
)

// TestSchedules: authz keeps the schedules' state (the last period fired,
// the pause state) and nobody else writes it, so no caller, processor or
// worker can pause a schedule or make a period look fired.
func TestSchedules(t *testing.T) {
	s := start(t)
	authz := s.as(t, "authz")
	key := streams.ScheduleKey("nightly")
	state := records.ScheduleState{Spec: "@every 1s", Since: time.Unix(1_800_000_000, 0).UTC()}
	tests := []boundary{{
		name: "authz reads and writes a schedule's state",
		allowed: func(t *testing.T) {
			authz.allowed(t, "create, read and update a schedule's state", func(ctx context.Context) error {
				kv, err := authz.js.KeyValue(ctx, streams.BucketSchedules)
				if err != nil {
					return err
				}
				_, err = streams.UpdateKV(ctx, kv, key, func([]byte, bool) ([]byte, error) { return state.Encode(), nil })
				if err != nil {
					return err
				}
				_, err = streams.UpdateKV(ctx, kv, key, func(cur []byte, _ bool) ([]byte, error) {
					st, err := records.DecodeScheduleState(cur)
					st.Paused = true
					return st.Encode(), err
				})
				return err
			})
		},
		denied: func(t *testing.T) {
			subj := kvSubject(streams.BucketResults, "1.0.0")
			s.deniedInto(t, authz, kvStream(streams.BucketResults), subj, authz.jsPublish(subj))
		},
	}}
	for _, user := range []string{"processor", "worker", "alice"} {
		r := s.as(t, user)
		tests = append(tests, boundary{
			name: user + " writes no schedule's state",
			allowed: func(t *testing.T) {
				r.allowed(t, "tick", func(context.Context) error {
					if err := r.nc.Publish(streams.TickSubject(domain), nil); err != nil {
						return err
					}
					return r.nc.Flush()
				})
			},
			denied: func(t *testing.T) {
				subj := kvSubject(streams.BucketSchedules, key)
				s.deniedInto(t, r, kvStream(streams.BucketSchedules), subj, r.jsPublish(subj))
			},
		})
	}
	runBoundaries(t, tests)
}
