package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/stat and /proc/<pid>/stat (100
// on Linux).
const clockTicks = 100

// cpuSample is the machine's busy time, the hookline processes' own CPU
// time and every process's at one moment, in clock ticks.
type cpuSample struct {
	at       time.Time
	busy     int64 // user+nice+system+irq+softirq of the "cpu" line of /proc/stat
	hookline int64 // utime+stime of the api, worker and dlq (all their threads)
	procs    map[int]procTime
}

func sampleCPU(pids []int) (cpuSample, error) {
	busy, err := machineBusy()
	if err != nil {
		return cpuSample{}, err
	}
	s := cpuSample{at: time.Now(), busy: busy, procs: snapshotProcs()}
	for _, pid := range pids {
		t, err := procTicks(pid)
		if err != nil {
			return cpuSample{}, err
		}
		s.hookline += t
	}
	return s, nil
}

// perDelivery formats ticks spent per delivery in milliseconds.
func perDelivery(ticks, deliveries int64) string {
	if deliveries <= 0 {
		return "n/a"
	}
	ms := float64(ticks) * float64(time.Second/clockTicks) / float64(time.Millisecond)
	return fmt.Sprintf("%.2f ms", ms/float64(deliveries))
}

// cores formats ticks spent over d as cores in use on average.
func cores(ticks int64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(ticks)/clockTicks/d.Seconds())
}

// waitQuiet waits until the machine is less than maxBusy cores busy over
// two seconds, at most limit, and returns the last busy measure and
// whether it was under maxBusy. Other people's builds and tests on the
// machine would otherwise be measured with the run.
func waitQuiet(ctx context.Context, maxBusy float64, limit time.Duration) (float64, bool, error) {
	deadline := time.Now().Add(limit)
	const window = 2 * time.Second
	for {
		b0, err := machineBusy()
		if err != nil {
			return 0, false, err
		}
		select {
		case <-ctx.Done():
			return 0, false, ctx.Err()
		case <-time.After(window):
		}
		b1, err := machineBusy()
		if err != nil {
			return 0, false, err
		}
		busy := float64(b1-b0) / clockTicks / window.Seconds()
		if busy < maxBusy {
			return busy, true, nil
		}
		if time.Now().After(deadline) {
			return busy, false, nil
		}
	}
}

// machineBusy reads the busy ticks of every core together. iowait, idle
// and steal are not work done here; guest time is already in user.
func machineBusy() (int64, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("unexpected first line of /proc/stat: %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} { // user nice system [idle iowait] irq softirq
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat field %d: %w", i, err)
		}
		busy += v
	}
	return busy, nil
}

// procTicks reads utime+stime of pid, its threads included.
func procTicks(pid int) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces; the fields after
	// it are fixed: utime and stime are the 12th and 13th.
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	return u + s, nil
}

// The shared services' processes: their CPU serves this run and anyone
// else using them, and cannot be told apart (Postgres backends can).
var serviceComms = map[string]bool{
	"postgres": true, "redis-server": true, "beam.smp": true, "erl_child_setup": true, "epmd": true, "inet_gethost": true,
}

// procTime is a process's CPU time at a snapshot.
type procTime struct {
	comm  string
	db    string // a Postgres backend's database, from its title
	ticks int64
}

// snapshotProcs reads the CPU time of every process.
func snapshotProcs() map[int]procTime {
	out := map[int]procTime{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		l, r := bytes.IndexByte(raw, '('), bytes.LastIndexByte(raw, ')')
		ticks, err := procTicks(pid)
		if l < 0 || r < l || err != nil {
			continue
		}
		p := procTime{comm: string(raw[l+1 : r]), ticks: ticks}
		if p.comm == "postgres" {
			p.db = backendDB(dir)
		}
		out[pid] = p
	}
	return out
}

// backendDB returns the database of a Postgres backend from its title,
// "postgres: 15/main: <user> <db> <host>(<port>) <state>"; "" for the
// postmaster and the background processes.
func backendDB(dir string) string {
	raw, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return ""
	}
	_, rest, ok := strings.Cut(strings.TrimRight(string(raw), "\x00 "), "main: ")
	if !ok {
		return ""
	}
	f := strings.Fields(rest)
	if len(f) >= 3 && (strings.Contains(f[2], "(") || f[2] == "[local]") {
		return f[1]
	}
	return ""
}

// othersTicks is the CPU that processes outside this run used between two
// snapshots: everything but this program, the hookline processes, the
// shared services and the Postgres backends of the run's database. A
// process born in between counts from zero.
func othersTicks(before, after map[int]procTime, ours []int, db string) int64 {
	var sum int64
	for pid, a := range after {
		if pid == os.Getpid() || slices.Contains(ours, pid) {
			continue
		}
		if (a.db != "" && a.db == db) || (serviceComms[a.comm] && (a.comm != "postgres" || a.db == "")) {
			continue
		}
		d := a.ticks
		if b, ok := before[pid]; ok && b.comm == a.comm {
			d -= b.ticks
		}
		sum += max(d, 0)
	}
	return sum
}
