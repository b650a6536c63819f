// Package report prints benchmark tables, with the machine, the date and the
// command, and appends them to a file only when a program is asked to
// (-record FILE). docs/BENCHMARKS.md is written by hand: it states the
// current figures and what changed them, and git keeps the runs.
package report

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Machine describes this computer in one line.
func Machine() string {
	cpu := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	mem := ""
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(raw), "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB RAM", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d cores (%s)%s, %s, %s/%s", runtime.NumCPU(), cpu, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// Table is a titled table of results.
type Table struct {
	Title   string
	Command string
	Notes   []string
	Header  []string
	Rows    [][]string
}

// Markdown renders t with the machine and date.
func (t Table) Markdown(now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## %s (%s)\n\n", t.Title, now.UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(&b, "- Machine: %s\n", Machine())
	fmt.Fprintf(&b, "- Command: `%s`\n", t.Command)
	for _, n := range t.Notes {
		fmt.Fprintf(&b, "- %s\n", n)
	}
	b.WriteString("\n| " + strings.Join(t.Header, " | ") + " |\n|")
	for range t.Header {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, r := range t.Rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

// Emit prints t to stdout and, when record is not empty, appends it to the
// file record.
func Emit(t Table, record string) error {
	md := t.Markdown(time.Now())
	fmt.Println(md)
	if record == "" {
		return nil
	}
	f, err := os.OpenFile(record, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("record %s: %w", record, err)
	}
	if _, err := f.WriteString("\n" + md); err != nil {
		f.Close()
		return fmt.Errorf("record %s: %w", record, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("record %s: %w", record, err)
	}
	return nil
}

// Percentile returns the p-th percentile (0-100) of sorted durations.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

// Sort sorts durations in place and returns them.
func Sort(d []time.Duration) []time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d
}

// Ms formats a duration in milliseconds with two decimals.
func Ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

var sentKey = []byte(`"sent_ns":`)

// SentLatency reads the "sent_ns" (unix nanoseconds) that load programs put
// in an event's data and returns how long ago, at now, that was.
func SentLatency(body []byte, now time.Time) (time.Duration, bool) {
	i := bytes.Index(body, sentKey)
	if i < 0 {
		return 0, false
	}
	rest := body[i+len(sentKey):]
	j := bytes.IndexAny(rest, ",}")
	ns, err := strconv.ParseInt(string(rest[:max(j, 0)]), 10, 64)
	if err != nil {
		return 0, false
	}
	return now.Sub(time.Unix(0, ns)), true
}
