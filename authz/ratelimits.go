package authz

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// rateLimits are the callers' send rates on this replica: a token bucket
// per caller with a bound (Caller.SendRate), made on its first send and
// adjusted when a reloaded table changes the bound. Callers are nats.conf
// identities, so the map stays as small as the list of users.
type rateLimits struct {
	mu sync.Mutex
	by map[string]*rate.Limiter
}

// allowN takes n sends from user's bucket at now, all or none, and reports
// whether there were n; a caller without a bound always may.
func (r *rateLimits) allowN(user string, l callerLimits, now time.Time, n int) bool {
	if l.sendRate <= 0 {
		return true
	}
	limit := rate.Limit(l.sendRate)
	r.mu.Lock()
	lim := r.by[user]
	switch {
	case lim == nil:
		if r.by == nil {
			r.by = map[string]*rate.Limiter{}
		}
		lim = rate.NewLimiter(limit, l.sendBurst)
		r.by[user] = lim
	case lim.Limit() != limit || lim.Burst() != l.sendBurst:
		lim.SetLimitAt(now, limit)
		lim.SetBurstAt(now, l.sendBurst)
	}
	r.mu.Unlock()
	return lim.AllowN(now, n)
}
