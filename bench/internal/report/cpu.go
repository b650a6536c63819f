package report

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTicks = 100

// CPUGroups names the processes whose CPU use a benchmark reports: this
// process (hookline in-process), and the local services.
var CPUGroups = map[string][]string{
	"hookline": nil, // this process
	"postgres": {"postgres"},
	"rabbitmq": {"beam.smp"},
	"redis":    {"redis-server"},
}

// CPUSample is the CPU time used so far by each group, read from /proc.
type CPUSample struct {
	At    time.Time
	Ticks map[string]int64
}

// SampleCPU reads the CPU time of every group.
func SampleCPU() CPUSample {
	s := CPUSample{At: time.Now(), Ticks: map[string]int64{}}
	s.Ticks["hookline"] = procTicks(os.Getpid())
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range pids {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == os.Getpid() {
			continue
		}
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil {
			continue
		}
		name := strings.TrimSpace(string(comm))
		for group, names := range CPUGroups {
			for _, n := range names {
				if name == n {
					s.Ticks[group] += serviceTicks(pid)
				}
			}
		}
	}
	return s
}

// MachineTicks returns the busy time of every core together, from
// /proc/stat (user, nice, system, irq and softirq), in clock ticks; 0 when
// it cannot be read. On a shared machine it counts everyone's work.
func MachineTicks() int64 {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		busy += v
	}
	return busy
}

// ProcTicks returns the CPU time pid has used, its threads included, in
// clock ticks (see TicksDuration); 0 when it cannot be read.
func ProcTicks(pid int) int64 { return procTicks(pid) }

// TicksDuration converts clock ticks of /proc to a duration.
func TicksDuration(ticks int64) time.Duration { return time.Duration(ticks) * time.Second / clockTicks }

// procTicks returns utime+stime of pid (its threads included).
func procTicks(pid int) int64 {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return u + st
}

// serviceTicks is the CPU time of a service's process pid and of its
// children that have exited: a Postgres backend's time, once the backend
// is gone, is in its postmaster's (cutime and cstime), so the sum over a
// service's processes only grows, whichever of them come and go.
func serviceTicks(pid int) int64 {
	f := statFields(pid)
	if len(f) < 15 {
		return 0
	}
	var sum int64
	for _, i := range []int{11, 12, 13, 14} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		sum += v
	}
	return sum
}

// statFields is the fields of /proc/<pid>/stat after the command name, nil
// when it cannot be read.
func statFields(pid int) []string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	// The command name may hold spaces; the fields after it are fixed.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// CPUUse formats the cores each group used on average between a and b,
// as "hookline 0.92, postgres 0.71, rabbitmq 0.20, redis 0.03".
func CPUUse(a, b CPUSample) string {
	secs := b.At.Sub(a.At).Seconds()
	var parts []string
	for _, g := range []string{"hookline", "postgres", "rabbitmq", "redis"} {
		parts = append(parts, fmt.Sprintf("%s %.2f", g, float64(b.Ticks[g]-a.Ticks[g])/clockTicks/secs))
	}
	return strings.Join(parts, ", ")
}
