package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// msgCount is what an observer of every subject of the account saw of one
// class of message.
type msgCount struct {
	class string
	role  string
	kind  string // "request" (has a reply subject: one round trip) or "one-way"
	n     int
}

// counter counts messages by (class, role, kind).
type counter struct {
	mu sync.Mutex
	m  map[[3]string]int
}

func (c *counter) snapshot() map[[3]string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[[3]string]int, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// classify names a message by what it does. Requests carry a reply subject
// in the requester's own inbox (_INBOX_<role>), which names the role.
func classify(m *nats.Msg) (class, role, kind string, skip bool) {
	s := m.Subject
	if strings.HasPrefix(s, "_INBOX_") || strings.HasPrefix(s, "$SRV.") || strings.HasPrefix(s, "_R_") || strings.HasPrefix(s, "$JS.EVENT.") {
		return "", "", "", true // replies: the other half of a request; advisories
	}
	if r, ok := strings.CutPrefix(m.Reply, "$JS.ACK."); ok {
		// A message a consumer delivers keeps its stream subject; it is
		// the answer to a fetch, not a message of its own.
		stream, _, _ := strings.Cut(r, ".")
		return "delivered by consumer on " + stream, "server", "delivery", false
	}
	kind = "one-way"
	if m.Reply != "" {
		kind = "request"
		if r, ok := strings.CutPrefix(m.Reply, "_INBOX_"); ok {
			role, _, _ = strings.Cut(r, ".")
		}
	}
	tok := strings.Split(s, ".")
	switch {
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET.") && len(tok) > 4:
		class = "KV/stream direct get " + strings.TrimPrefix(tok[4], "KV_")
	case strings.HasPrefix(s, "$KV.") && len(tok) > 1:
		class = "KV write " + tok[1]
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT.") && len(tok) > 5:
		class = "fetch " + tok[5]
	case strings.HasPrefix(s, "$JS.ACK.") && len(tok) > 2:
		class = "ack " + tok[2]
		if kind == "one-way" && tok[2] == "CALLBACKS" {
			role = "authz"
		} else if kind == "one-way" {
			role = "processor"
		}
	case strings.HasPrefix(s, "$JS.API."):
		class = "JS API " + strings.Join(tok[2:min(len(tok), 4)], ".")
	case strings.HasPrefix(s, "batches."):
		class, role = "publish token", "authz"
	case strings.HasPrefix(s, "requeue."):
		class, role = "publish requeue token", "processor"
	case strings.HasPrefix(s, "callbacks."):
		class, role = "publish callback", "processor"
	case s == "ids.batch":
		class, role = "assign id (publish to id log)", "authz"
	case strings.HasPrefix(s, "work."):
		class, role = "work request "+strings.Join(tok[1:], "."), "processor"
	case strings.HasPrefix(s, "authz."):
		class, role = "authz "+tok[len(tok)-1]+" request", "alice"
	case strings.HasPrefix(s, "tick."):
		class = "tick"
	case strings.HasPrefix(s, "submitted."):
		class, role = "submitter index entry", "authz"
	case strings.HasPrefix(s, "outcomes."):
		class, role = "publish outcome to its submitter", "authz"
	default:
		// By its first two tokens: a subject with a batch id in it would
		// otherwise be a class of its own per batch.
		class = strings.Join(tok[:min(len(tok), 2)], ".") + ".…"
	}
	if role == "" {
		role = "?"
	}
	return class, role, kind, false
}

// rttResult is the count of messages per batch, by phase.
type rttResult struct {
	n      int
	submit []msgCount
	drain  []msgCount
	ticks  int
	idle   int
	procs  int
}

// runRTT submits n atomic no-op batches and drains them, with an admin
// subscription on ">" counting every message of the account by class and
// by the role that sent it. Every message with a reply subject is one round
// trip of its sender; the rest are one-way. The observer doubles the
// server's fan-out, so this run measures counts, not speed.
func runRTT(cfg *config, n int) (*rttResult, error) {
	e, alice, err := tickflowEnv(cfg)
	if err != nil {
		return nil, err
	}
	defer e.close()
	obs, err := e.connect("admin")
	if err != nil {
		return nil, err
	}
	c, sub, err := countAll(obs)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := obs.Flush(); err != nil {
		return nil, err
	}
	before := c.snapshot()
	if _, err := submitAll(e.ctx, alice, labelAtomic, 1, n, cfg.inflight, nil); err != nil {
		return nil, err
	}
	if err := settle(obs, c); err != nil {
		return nil, err
	}
	mid := c.snapshot()
	start := time.Now()
	e.startTicking(cfg.tickSteps, cfg.idle)
	// Stop ticking as soon as the last callback is published, so idle ticks
	// do not blur the per-batch count; then wait for authz to apply them.
	for {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		pub, _, err := e.callbackProgress(ctx)
		cancel()
		if err != nil {
			return nil, err
		}
		if pub >= uint64(n) {
			break
		}
		if time.Since(start) > 10*time.Minute {
			return nil, fmt.Errorf("rtt: drain did not finish")
		}
		time.Sleep(2 * time.Millisecond)
	}
	e.stopTicking()
	if _, _, err := e.waitCallbacks(start, uint64(n), cfg.stall); err != nil {
		return nil, err
	}
	if err := settle(obs, c); err != nil {
		return nil, err
	}
	after := c.snapshot()
	r := &rttResult{n: n, ticks: e.tickStats.ticks, idle: e.tickStats.idle, procs: len(e.procs)}
	r.submit = diff(before, mid)
	r.drain = diff(mid, after)
	return r, nil
}

// settle waits until the observer has seen everything sent so far.
func settle(obs *nats.Conn, c *counter) error {
	prev := -1
	for {
		if err := obs.Flush(); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		total := 0
		for _, v := range c.snapshot() {
			total += v
		}
		if total == prev {
			return nil
		}
		prev = total
	}
}

func diff(a, b map[[3]string]int) []msgCount {
	var out []msgCount
	for k, v := range b {
		if d := v - a[k]; d > 0 {
			out = append(out, msgCount{class: k[0], role: k[1], kind: k[2], n: d})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].role != out[j].role {
			return out[i].role < out[j].role
		}
		if out[i].kind != out[j].kind {
			return out[i].kind > out[j].kind
		}
		return out[i].class < out[j].class
	})
	return out
}

// writeRTT prints the per-batch message counts as a markdown table.
func writeRTT(w io.Writer, r *rttResult) {
	fmt.Fprintf(w, "Messages per batch (%d atomic no-op batches; %d ticks, %d of them idle, over %d processor(s)):\n\n", r.n, r.ticks, r.idle, r.procs)
	for _, phase := range []struct {
		name string
		c    []msgCount
	}{{"submit (authz send)", r.submit}, {"drain (tick → worker → callback → authz apply)", r.drain}} {
		fmt.Fprintf(w, "| %s | role | kind | per batch |\n|---|---|---|---:|\n", phase.name)
		reqs := map[string]float64{}
		for _, m := range phase.c {
			per := float64(m.n) / float64(r.n)
			fmt.Fprintf(w, "| %s | %s | %s | %.2f |\n", m.class, m.role, m.kind, per)
			if m.kind == "request" {
				reqs[m.role] += per
			}
		}
		roles := make([]string, 0, len(reqs))
		for k := range reqs {
			roles = append(roles, k)
		}
		sort.Strings(roles)
		total := 0.0
		for _, k := range roles {
			if k == "admin" {
				fmt.Fprintf(w, "| round trips, admin (the bench's own progress polling, not counted) | | | %.2f |\n", reqs[k])
				continue
			}
			fmt.Fprintf(w, "| **round trips, %s** | | | **%.2f** |\n", k, reqs[k])
			total += reqs[k]
		}
		fmt.Fprintf(w, "| **round trips, all tickflow roles** | | | **%.2f** |\n\n", total)
	}
}

// countAll counts every message of the account that obs sees from now on,
// by class, role and kind (classify); the subscription drops none.
func countAll(obs *nats.Conn) (*counter, *nats.Subscription, error) {
	c := &counter{m: map[[3]string]int{}}
	sub, err := obs.Subscribe(">", func(m *nats.Msg) {
		class, role, kind, skip := classify(m)
		if skip {
			return
		}
		c.mu.Lock()
		c.m[[3]string{class, role, kind}]++
		c.mu.Unlock()
	})
	if err != nil {
		return nil, nil, err
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, nil, err
	}
	return c, sub, nil
}
