package main

import (
	"os"
	"strconv"
	"strings"
)

const clockTicks = 100 // USER_HZ on Linux

// treeCPU is the CPU-seconds used so far by the process pid and its
// children: the live children's own time, and through the parent's
// cutime and cstime the time of those it has reaped (PostgreSQL's
// postmaster reaps its backends). It returns -1 when pid is 0 or /proc
// cannot be read.
func treeCPU(pid int) float64 {
	if pid <= 0 {
		return -1
	}
	f, ok := statFields(strconv.Itoa(pid))
	if !ok {
		return -1
	}
	total := ticks(f, 11, 15) // utime, stime, cutime, cstime
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return -1
	}
	parent := strconv.Itoa(pid)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.Name() == parent {
			continue
		}
		cf, ok := statFields(e.Name())
		if !ok || cf[1] != parent {
			continue
		}
		total += ticks(cf, 11, 13) // utime, stime
	}
	return total / clockTicks
}

// statFields are the fields of /proc/<pid>/stat after the command name:
// [0] is the state, [1] the parent's pid, [11:15] utime, stime, cutime,
// cstime.
func statFields(pid string) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	f := strings.Fields(s[i+1:])
	return f, len(f) >= 15
}

func ticks(f []string, from, to int) float64 {
	var t float64
	for _, s := range f[from:to] {
		v, _ := strconv.ParseFloat(s, 64)
		t += v
	}
	return t
}
