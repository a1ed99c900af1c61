package chaos

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/streams"
)

// killAtRandom kills a process of the scenario's kinds at random moments
// until ctx ends.
func killAtRandom(ctx context.Context, sys *System, sc Scenario, rng *rand.Rand) {
	var targets []*Proc
	for _, k := range sc.Kill {
		targets = append(targets, sys.Targets(k)...)
	}
	if len(targets) == 0 {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(between(rng, sc.KillEvery)):
		}
		targets[rng.IntN(len(targets))].Kill(between(rng, sc.Down))
	}
}

// between draws a duration in [r[0], r[1]].
func between(rng *rand.Rand, r [2]time.Duration) time.Duration {
	if r[1] <= r[0] {
		return r[0]
	}
	return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])))
}

// killServer kills the only server, or a cluster's MED leader, and lets
// its supervisor start it again on its store after the scenario's downtime.
func killServer(ctx context.Context, sys *System, sc Scenario, o Options, admin *nats.Conn) {
	target := sys.Servers[0]
	if len(sys.Servers) > 1 {
		if name, err := streamLeader(ctx, admin, streams.StreamMed); err == nil {
			if s, err := sys.ServerNamed(name); err == nil {
				target = s
			}
		}
	}
	down := sc.ServerDown
	if down == 0 {
		down = time.Second
	}
	o.progress("%s: kill -9 %s, back in %s", sc.Name, target.ServerName, down)
	target.Kill(down)
}

// replicatedStreams are the streams whose replicas must all be current
// before a cluster loses another server: a second loss while one replica
// still catches up would take the majority.
var replicatedStreams = []string{
	streams.StreamHigh, streams.StreamMed, streams.StreamCallbacks, streams.StreamDLQ, streams.StreamIDs, streams.StreamSubmitted,
	"KV_" + streams.BucketBatches, "KV_" + streams.BucketProgress, "KV_" + streams.BucketResults, "KV_" + streams.BucketLocks,
}

// replicasCurrent reports whether, on a cluster of n servers, every
// replicated stream has a leader and every replica is online and current.
func replicasCurrent(ctx context.Context, js jetstream.JetStream, n int) bool {
	if n < 2 {
		return true
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, name := range replicatedStreams {
		s, err := js.Stream(ictx, name)
		if err != nil {
			return false
		}
		ci := s.CachedInfo().Cluster
		if ci == nil || ci.Leader == "" || len(ci.Replicas) != n-1 {
			return false
		}
		for _, r := range ci.Replicas {
			if !r.Current || r.Offline {
				return false
			}
		}
	}
	return true
}
