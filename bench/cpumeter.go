package main

import (
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// cpuMeter tells how much CPU other processes of the machine used while
// the bench ran: the machine's busy time (/proc/stat) less this process's
// and its children's (/proc/self/stat), in cores.
type cpuMeter struct {
	at          time.Time
	busy, owned float64 // seconds
}

func startMeter() cpuMeter {
	m := cpuMeter{at: time.Now()}
	m.busy, m.owned = machineBusy(), selfBusy()
	return m
}

// others returns the average number of cores other processes kept busy
// since the meter started (0 when /proc is unreadable).
func (m cpuMeter) others() float64 {
	el := time.Since(m.at).Seconds()
	if el <= 0 || m.busy == 0 {
		return 0
	}
	v := ((machineBusy() - m.busy) - (selfBusy() - m.owned)) / el
	return max(v, 0)
}

const clockTicks = 100 // USER_HZ on Linux

func machineBusy() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var total, idle float64
	for i, s := range f[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		if i >= 8 { // guest time is already counted in user
			break
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return (total - idle) / clockTicks
}

// selfBusy is the CPU-seconds this process and the children it has
// waited for have used.
func selfBusy() float64 { return statBusy("self", 15) }

// pidBusy is the CPU-seconds the process pid has used itself (0 when /proc
// cannot be read).
func pidBusy(pid int) float64 { return statBusy(strconv.Itoa(pid), 13) }

// statBusy adds the times of /proc/<pid>/stat from utime on: with to = 13
// utime and stime, with to = 15 cutime and cstime as well.
func statBusy(pid string, to int) float64 {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
	if len(f) < 15 {
		return 0
	}
	var t float64
	for _, s := range f[11:to] {
		v, _ := strconv.ParseFloat(s, 64)
		t += v
	}
	return t / clockTicks
}

// waitQuiet waits, up to max, until other processes have used less than
// 0.15 core over a whole second, so that a repetition starts on a quiet
// machine. It returns the load it last saw.
func waitQuiet(max time.Duration) float64 {
	if max <= 0 {
		return 0
	}
	deadline := time.Now().Add(max)
	for {
		m := startMeter()
		time.Sleep(time.Second)
		o := m.others()
		if o < 0.15 || time.Now().After(deadline) {
			return o
		}
	}
}

// startCPUProfile starts the process's CPU profile into path; stop ends it
// and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	if mutexProfile {
		runtime.SetMutexProfileFraction(10)
		runtime.SetBlockProfileRate(int(10 * time.Microsecond))
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if mutexProfile {
			// Cumulative since the first profile started: the submit's
			// contention and then the drain's.
			for _, p := range []string{"mutex", "block"} {
				if f, err := os.Create(path + "." + p); err == nil {
					_ = pprof.Lookup(p).WriteTo(f, 0)
					f.Close()
				}
			}
		}
	}, nil
}

// mutexProfile, set by -mutexprofile, writes the contention on mutexes
// and the waits of at least 10µs on channels, selects, locks and
// condition variables beside each CPU profile, as file.mutex and
// file.block.
var mutexProfile bool
