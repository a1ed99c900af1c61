package chaos

import (
	"fmt"
	"strings"
	"time"
)

// mixed is the load of the kill scenarios: three quick functions per batch,
// some atomic, some failing for good, some failing once first.
func mixed(name, about string) Scenario {
	return Scenario{
		Name: name, About: about, Batches: 120, Servers: 1,
		Functions: 3, SleepMS: 50, AtomicRate: 0.2, FailRate: 0.1, FlakyRate: 0.1,
		WorkTimeout: 2 * time.Second, AckWait: 5 * time.Second, WorkerConcurrency: 16,
		KillEvery: [2]time.Duration{500 * time.Millisecond, 2 * time.Second},
		Down:      [2]time.Duration{200 * time.Millisecond, time.Second},
		Spread:    20 * time.Second, Deadline: 2 * time.Minute,
	}
}

// Scenarios lists every scenario, in the order they run.
func Scenarios() []Scenario {
	procs := mixed("kill-processors", "kill -9 a processor at random moments, restart it")
	procs.Kill = []string{KindProcessor}
	workers := mixed("kill-workers", "kill -9 a worker at random moments, restart it")
	workers.Kill = []string{KindWorker}
	az := mixed("kill-authz", "kill -9 authz at random moments (submissions and callbacks), restart it; a quarter of the batches sent without an idempotency key, never sent again")
	az.Kill = []string{KindAuthz}
	// A kill between a plain batch's record and its token leaves it to the
	// next authz start: every recorded batch must still finish.
	az.PlainRate = 0.25
	// Down longer than a worker's completion-record write may take (5s),
	// so the writes in flight when the server died fail.
	server := mixed("server-restart", "kill -9 the nats-server three times under load, restart it on its store 6s later")
	server.ServerKills, server.ServerDown = []time.Duration{4 * time.Second, 14 * time.Second, 24 * time.Second}, 6*time.Second
	// Longer calls, so that some are under way whenever a server dies.
	server.Spread, server.SleepMS = 30*time.Second, 200
	cluster := mixed("cluster-leader", "3 servers, R3 streams and buckets: kill -9 the MED stream leader three times under load, restart it")
	cluster.Servers, cluster.ServerDown = 3, 3*time.Second
	cluster.ServerKills = []time.Duration{4 * time.Second, 11 * time.Second, 18 * time.Second}
	cluster.SleepMS, cluster.Deadline = 200, 3*time.Minute
	// Two processors asking 16 steps at a time keep 32 calls waiting for 4
	// slots: the last of them wait longer than the worker timeout.
	slow := Scenario{
		Name: "slow-handlers", About: "handlers taking 2s, 2 workers of 2 slots each, worker timeout 10s, 32 calls at once",
		Batches: 300, Servers: 1, Label: LabelSlow, Functions: 1, SleepMS: 2000,
		WorkTimeout: 10 * time.Second, AckWait: 30 * time.Second, WorkerConcurrency: 2, TickSteps: 16,
		Spread: 5 * time.Second, Deadline: 6 * time.Minute,
	}
	return []Scenario{procs, workers, az, server, cluster, slow}
}

// Select returns the scenarios named in a comma-separated list, in the
// order given; "" or "all" selects every one.
func Select(names string) ([]Scenario, error) {
	all := Scenarios()
	if names == "" || names == "all" {
		return all, nil
	}
	var out []Scenario
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, sc := range all {
			if sc.Name == n {
				out = append(out, sc)
				found = true
			}
		}
		if !found {
			known := make([]string, len(all))
			for i, sc := range all {
				known[i] = sc.Name
			}
			return nil, fmt.Errorf("%w %q (known: %s)", ErrUnknownScenario, n, strings.Join(known, ", "))
		}
	}
	return out, nil
}
