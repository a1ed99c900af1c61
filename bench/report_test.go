package main

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseCounts(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []int
		err  bool
	}{
		{name: "list", in: "1,2,4", want: []int{1, 2, 4}},
		{name: "spaces and empty fields", in: " 1, ,2 ", want: []int{1, 2}},
		{name: "zero", in: "0,1", err: true},
		{name: "word", in: "two", err: true},
		{name: "empty", in: "", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCounts("scale-processors", tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("parseCounts(%q) error %v, want error %v", tt.in, err, tt.err)
			}
			if err != nil && !strings.Contains(err.Error(), "-scale-processors") {
				t.Errorf("error %q does not name the flag", err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("parseCounts(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

// TestTargets judges each goal from the medians: the asynq floor can be met
// while the goal is missed, a goal without figures is not measured, and a
// depth other than the goal's says which depths it judged.
func TestTargets(t *testing.T) {
	cfg := &config{depthSmall: 1000, depthLarge: 200000}
	res := &results{figs: map[string]*figure{}}
	for k, v := range map[string]float64{
		"tf.drain": 2000, "aq.drain": 1000, "tf.submit": 6000, "aq.enq": 10000,
		"cl.drain": 400, "cl.single": 1000, "depth.small": 100, "depth.large": 110, "rss.large": 20,
	} {
		res.add(k, k, "", v, cpuMeter{})
	}
	got := map[string]target{}
	for _, tg := range targets(cfg, res) {
		got[tg.what] = tg
	}
	for _, tt := range []struct {
		what        string
		known, met  bool
		measuredHas string
	}{
		{what: "burn-down drain ≥ 3× asynq's drain (goal)", known: true, met: false, measuredHas: "2.00×"},
		{what: "burn-down drain ≥ 1.5× asynq's drain (floor)", known: true, met: true, measuredHas: "2.00×"},
		{what: "submit through authz ≥ 50% of asynq's enqueue", known: true, met: true, measuredHas: "60.0%"},
		{what: "p99 submit → callback ≤ 5 ms at half the rate sustained with submit and drain together", known: false},
		{what: "cluster drain ≥ 50% of single node", known: true, met: false, measuredHas: "40.0%"},
		{what: "tick cost at 1M queued within 1.2× of 1k (measured at 200k vs 1k queued)", known: true, met: true, measuredHas: "1.10×"},
		{what: "processor RSS ≤ 64 MiB at 1M queued (measured at 200k vs 1k queued)", known: true, met: true},
		{what: "burn-down drain ≥ 25% of the ceiling's consume+ack", known: false},
	} {
		tg, ok := got[tt.what]
		if !ok {
			t.Errorf("no target %q", tt.what)
			continue
		}
		if tg.known != tt.known || tg.met != tt.met || !strings.Contains(tg.measured, tt.measuredHas) {
			t.Errorf("%s: known %v met %v measured %q; want known %v met %v measured containing %q",
				tt.what, tg.known, tg.met, tg.measured, tt.known, tt.met, tt.measuredHas)
		}
	}
}

// TestCeilingDrainBound: the bound is the cores over a batch's stores and
// consumes at the ceiling's CPU per message, from the medians; without
// both ceiling figures there is none.
func TestCeilingDrainBound(t *testing.T) {
	res := &results{figs: map[string]*figure{}}
	if _, ok := ceilingDrainBound(res); ok {
		t.Fatal("a bound without the ceiling's figures")
	}
	var m cpuMeter
	for _, v := range []float64{0.010, 0.012, 0.030} {
		res.add("ceil.pubcpu", "publish", "CPU-s/1k", v, m) // median 0.012
	}
	if _, ok := ceilingDrainBound(res); ok {
		t.Fatal("a bound without the consume's figure")
	}
	res.add("ceil.conscpu", "consume", "CPU-s/1k", 0.014, m)
	got, ok := ceilingDrainBound(res)
	// 4 × 12 µs + 2 × 14 µs = 76 µs a batch.
	want := float64(runtime.GOMAXPROCS(0)) / 76e-6
	if !ok || math.Abs(got-want) > 1e-6*want {
		t.Fatalf("bound %v (%v), want %v", got, ok, want)
	}
}

// TestShippedTargets judges the shipped wiring's goals: the ratio at every
// replica count, more replicas against the fewest, the 16-core goal only
// on 16 cores or more, the latency at 50/s, the idle CPU of 3 or more
// replicas and the throttle within 10% of its limit.
func TestShippedTargets(t *testing.T) {
	cfg := &config{shippedProcs: []int{1, 2, 4}, throttleRate: 200, throttleReplicas: 3}
	res := &results{figs: map[string]*figure{}, throttleLimit: 200}
	for k, v := range map[string]float64{
		"sh.ratio.1": 95, "sh.ratio.2": 92, "sh.ratio.4": 89,
		"sh.drain.1": 1000, "sh.drain.2": 1100, "sh.drain.4": 990,
		"sh.lat50.p50": 2, "sh.lat50.p99": 30,
		"sh.idle.1": 0.4, "sh.idle.2": 0.5, "sh.idle.4": 2.5,
		"th.rate": 221,
	} {
		res.add(k, k, "", v, cpuMeter{})
	}
	got := map[string]target{}
	for _, tg := range targets(cfg, res) {
		got[tg.what] = tg
	}
	for _, tt := range []struct {
		what        string
		known, met  bool
		measuredHas string
	}{
		{what: "drain as shipped ≥ 90% of back to back (median of the pairs), every replica count", known: true, met: false, measuredHas: "4: 89.0%"},
		{what: "more replicas as shipped not slower than 1", known: true, met: false, measuredHas: "4: 990 / 1000 = 0.99×"},
		{what: "latency as shipped at 50 batches/s: p50 ≤ 10 ms, p99 ≤ 50 ms", known: true, met: true, measuredHas: "p99 30.00 ms"},
		{what: "a domain with 3 idle replicas (as shipped, the whole process) < 2% of a core", known: true, met: false, measuredHas: "with 4 idle replicas"},
		{what: "a domain throttled to 200 steps/s with 3 replicas runs within ±10%", known: true, met: false, measuredHas: "221.0"},
	} {
		tg, ok := got[tt.what]
		if !ok {
			t.Errorf("no target %q", tt.what)
			continue
		}
		if tg.known != tt.known || tg.met != tt.met || !strings.Contains(tg.measured, tt.measuredHas) {
			t.Errorf("%s: known %v met %v measured %q; want known %v met %v measured containing %q",
				tt.what, tg.known, tg.met, tg.measured, tt.known, tt.met, tt.measuredHas)
		}
	}
	many := got["on 16 cores or more, 4 replicas as shipped ≥ 2× one"]
	if wantKnown := runtime.NumCPU() >= 16; many.known != wantKnown || !strings.Contains(many.measured, "0.99×") {
		t.Errorf("16-core goal: known %v measured %q; want known %v, measured holding 0.99×", many.known, many.measured, wantKnown)
	}

	// A run without the shipped phases measures none of them.
	for _, tg := range shippedTargets(&config{}, &results{figs: map[string]*figure{}}) {
		if tg.known {
			t.Errorf("%s: known without figures (%q)", tg.what, tg.measured)
		}
	}
}

// TestFairnessTargets judges the fairness phase's goals: every listing
// answered within 2 s (a refusal is an answer, a timeout is not), every
// send of bob's within 1 s, and the RSS after the large listings within
// 20% of before; a run without the phase measures none of them.
func TestFairnessTargets(t *testing.T) {
	const (
		lists = "fairness: every one of 64 × list {limit 10}, 16 at a time, answered within 2 s"
		bob   = "fairness: every send of bob's meanwhile answered within 1 s"
		rss   = "fairness: RSS after 2,000 × list {limit 500} within 20% of before (the whole bench process)"
	)
	type want struct {
		known, met  bool
		measuredHas string
	}
	tests := []struct {
		name string
		figs map[string]float64
		want map[string]want
	}{
		{
			name: "all within their goals, some listings refused",
			figs: map[string]float64{
				"fair.list.max": 1999, "fair.list.p99": 900, "fair.list.429": 12, "fair.list.failed": 0,
				"fair.bob.max": 40, "fair.bob.n": 30, "fair.bob.failed": 0,
				"fair.bob.bigmax": 999, "fair.bob.bign": 80, "fair.bob.bigfailed": 0,
				"fair.rss.before": 100, "fair.rss.after": 119,
			},
			want: map[string]want{
				lists: {known: true, met: true, measuredHas: "max 1999.00 ms, p99 900.00 ms; 0 not answered, 12 refused 429"},
				bob:   {known: true, met: true, measuredHas: "during the listings of 10: max 40.00 ms, 0 not answered; during the listings of 500: max 999.00 ms"},
				rss:   {known: true, met: true, measuredHas: "1.19×"},
			},
		},
		{
			name: "slow listing, slow send, memory kept",
			figs: map[string]float64{
				"fair.list.max": 2001, "fair.list.p99": 2001, "fair.list.429": 0, "fair.list.failed": 0,
				"fair.bob.max": 5, "fair.bob.n": 30, "fair.bob.failed": 0,
				"fair.bob.bigmax": 1001, "fair.bob.bign": 80, "fair.bob.bigfailed": 0,
				"fair.rss.before": 100, "fair.rss.after": 121,
			},
			want: map[string]want{
				lists: {known: true, met: false, measuredHas: "max 2001.00 ms"},
				bob:   {known: true, met: false, measuredHas: "max 1001.00 ms"},
				rss:   {known: true, met: false, measuredHas: "1.21×"},
			},
		},
		{
			name: "fast answers but some timed out",
			figs: map[string]float64{
				"fair.list.max": 5, "fair.list.p99": 5, "fair.list.429": 0, "fair.list.failed": 3,
				"fair.bob.max": 5, "fair.bob.n": 28, "fair.bob.failed": 2,
			},
			want: map[string]want{
				lists: {known: true, met: false, measuredHas: "3 not answered"},
				bob:   {known: true, met: false, measuredHas: "2 not answered"},
				rss:   {known: false},
			},
		},
		{
			name: "nothing answered",
			figs: map[string]float64{"fair.list.429": 0, "fair.list.failed": 64, "fair.bob.n": 0, "fair.bob.failed": 30},
			want: map[string]want{
				lists: {known: true, met: false, measuredHas: "64 not answered"},
				bob:   {known: true, met: false, measuredHas: "30 not answered"},
			},
		},
		{
			name: "not run",
			want: map[string]want{lists: {known: false}, bob: {known: false}, rss: {known: false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &results{figs: map[string]*figure{}}
			for k, v := range tt.figs {
				res.add(k, k, "", v, cpuMeter{})
			}
			got := map[string]target{}
			for _, tg := range targets(&config{}, res) {
				got[tg.what] = tg
			}
			for what, w := range tt.want {
				tg, ok := got[what]
				if !ok {
					t.Errorf("no target %q", what)
					continue
				}
				if tg.known != w.known || (w.known && tg.met != w.met) || !strings.Contains(tg.measured, w.measuredHas) {
					t.Errorf("%s: known %v met %v measured %q; want known %v met %v measured containing %q",
						what, tg.known, tg.met, tg.measured, w.known, w.met, w.measuredHas)
				}
			}
		})
	}
}

// TestSoakTargets judges the soak's last window against the one a third of
// the way in, for the store on disk and the RSS apart; fewer than 3
// windows are not judged.
func TestSoakTargets(t *testing.T) {
	ten := func(disk func(i int) int64, rss func(i int) float64) []soakWindow {
		ws := make([]soakWindow, 10)
		for i := range ws {
			ws[i] = soakWindow{at: time.Duration(i+1) * time.Minute, done: uint64(i+1) * 1000, disk: disk(i), rss: rss(i)}
		}
		return ws
	}
	flat := func(int) int64 { return 100 << 20 }
	growing := func(i int) int64 { return int64(i+1) * (50 << 20) }
	tests := []struct {
		name                      string
		ws                        []soakWindow
		known, diskMet, rssMet    bool
		diskMeasured, rssMeasured string
	}{
		{
			name:  "level after the first windows",
			ws:    ten(func(i int) int64 { return min(int64(i+1), 3) * (40 << 20) }, func(i int) float64 { return 300 + float64(min(i, 4))*20 }),
			known: true, diskMet: true, rssMet: true,
			// Window 4 of 10 (index 3) is the one a third of the way in.
			diskMeasured: "120.0 MiB at 4m0s → 120.0 MiB at 10m0s = 1.00×", rssMeasured: "360.0 MiB at 4m0s → 380.0 MiB at 10m0s = 1.06×",
		},
		{
			name:  "disk grows, RSS level",
			ws:    ten(growing, func(int) float64 { return 400 }),
			known: true, diskMet: false, rssMet: true,
			diskMeasured: "200.0 MiB at 4m0s → 500.0 MiB at 10m0s = 2.50×", rssMeasured: "= 1.00×",
		},
		{
			name:  "disk level, RSS grows past 1.2×",
			ws:    ten(flat, func(i int) float64 { return 100 + 10*float64(i) }),
			known: true, diskMet: true, rssMet: false,
			diskMeasured: "= 1.00×", rssMeasured: "130.0 MiB at 4m0s → 190.0 MiB at 10m0s = 1.46×",
		},
		{
			name: "too short to judge",
			ws:   ten(flat, func(int) float64 { return 1 })[:2],
		},
		{
			name: "not run",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := soakTargets(tt.ws)
			if len(ts) != 2 {
				t.Fatalf("%d targets, want 2 (disk, RSS)", len(ts))
			}
			disk, rss := ts[0], ts[1]
			if disk.known != tt.known || rss.known != tt.known {
				t.Fatalf("known: disk %v RSS %v, want %v", disk.known, rss.known, tt.known)
			}
			if disk.met != tt.diskMet || !strings.Contains(disk.measured, tt.diskMeasured) {
				t.Errorf("disk: met %v measured %q; want met %v measured containing %q", disk.met, disk.measured, tt.diskMet, tt.diskMeasured)
			}
			if rss.met != tt.rssMet || !strings.Contains(rss.measured, tt.rssMeasured) {
				t.Errorf("RSS: met %v measured %q; want met %v measured containing %q", rss.met, rss.measured, tt.rssMet, tt.rssMeasured)
			}
		})
	}
}
