package authz

import (
	"testing"
	"time"
)

// TestRateLimitsAlone: a caller's sends are allowed up to its burst at
// once, then at its rate; a caller without a bound always may; each
// caller has a bucket of its own; a changed bound takes effect on the
// next send, in the bucket the caller has, which keeps what it accrued
// up to the new burst.
func TestRateLimitsAlone(t *testing.T) {
	var r rateLimits
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	two := callerLimits{sendRate: 2, sendBurst: 2}
	for _, tc := range []struct {
		name string
		user string
		l    callerLimits
		at   time.Duration
		want bool
	}{
		{name: "no bound", user: "carol", at: 0, want: true},
		{name: "no bound, again", user: "carol", at: 0, want: true},
		{name: "first of the burst", user: "alice", l: two, at: 0, want: true},
		{name: "second of the burst", user: "alice", l: two, at: 0, want: true},
		{name: "burst spent", user: "alice", l: two, at: 0, want: false},
		{name: "another caller's bucket", user: "bob", l: two, at: 0, want: true},
		{name: "too soon for the next", user: "alice", l: two, at: 400 * time.Millisecond, want: false},
		{name: "at the rate", user: "alice", l: two, at: 500 * time.Millisecond, want: true},
		// What accrued under the old bound is kept, up to the new burst.
		{name: "a bound of one a minute", user: "alice", l: callerLimits{sendRate: 1.0 / 60, sendBurst: 1}, at: 30 * time.Second, want: true},
		{name: "the next, a second later", user: "alice", l: callerLimits{sendRate: 1.0 / 60, sendBurst: 1}, at: 31 * time.Second, want: false},
		{name: "a minute later", user: "alice", l: callerLimits{sendRate: 1.0 / 60, sendBurst: 1}, at: 91 * time.Second, want: true},
		{name: "the bound lifted", user: "alice", at: 91 * time.Second, want: true},
	} {
		if got := r.allowN(tc.user, tc.l, t0.Add(tc.at), 1); got != tc.want {
			t.Fatalf("%s: allowed %v, want %v", tc.name, got, tc.want)
		}
	}
	if len(r.by) != 2 {
		t.Fatalf("%d buckets, want alice's and bob's only", len(r.by))
	}
}
