package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The worker's counters read at the end of a scenario.
const (
	metricRepublishes = "hookline_delivery_republishes_total"
	metricDeliveries  = "hookline_deliveries_total"
	metricPostponed   = "hookline_deliveries_postponed_total"
)

// binaryNames reports whether the executable at path holds the string name.
// A metric the code registers is named in its binary, so a counter absent
// from a scrape is 0 (no series yet) when its name is there, and not
// exported at all when it is not.
func binaryNames(path, name string) (bool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	return bytes.Contains(raw, []byte(name)), nil
}

// scrape returns the sum over all label sets of each metric in names that
// the endpoint exposes; a metric it does not expose is absent from the map.
func scrape(ctx context.Context, url string, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer res.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	sums := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, _, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if !want[name] {
			continue
		}
		f := strings.Fields(line[strings.LastIndexByte(line, '}')+1:])
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %q: %w", url, line, err)
		}
		sums[name] += v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return sums, nil
}

// residentKB reads the resident memory of pid and its peak, VmRSS and
// VmHWM of /proc/<pid>/status, in kB.
func residentKB(pid int) (rss, peak int64, err error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		name, value, _ := strings.Cut(line, ":")
		f := strings.Fields(value)
		if len(f) != 2 || f[1] != "kB" || (name != "VmRSS" && name != "VmHWM") {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status: %q: %w", pid, line, err)
		}
		if name == "VmRSS" {
			rss = v
		} else {
			peak = v
		}
	}
	if rss == 0 || peak == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS or VmHWM", pid)
	}
	return rss, peak, nil
}

// groupStats sums the deliveries of a group of tenants as Postgres holds
// them.
type groupStats struct {
	deliveries   int64
	attempts     int64 // attempts recorded
	attempted    int64 // deliveries with at least one attempt recorded
	succeeded    int64
	postponedSum int64 // postponed_count: circuit and rate-limit postponements (not host_busy)
	postponedMax int64
}

func (g *groupStats) add(o groupStats) {
	g.deliveries += o.deliveries
	g.attempts += o.attempts
	g.attempted += o.attempted
	g.succeeded += o.succeeded
	g.postponedSum += o.postponedSum
	g.postponedMax = max(g.postponedMax, o.postponedMax)
}

// postponed formats the average and maximum postponed_count.
func (g groupStats) postponed() string {
	if g.deliveries == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f / %d", float64(g.postponedSum)/float64(g.deliveries), g.postponedMax)
}

const deliveryStatsSQL = `SELECT tenant_id::text, count(*), sum(attempt_count), count(*) FILTER (WHERE attempt_count > 0),
	count(*) FILTER (WHERE status = 'succeeded'), sum(postponed_count), max(postponed_count)
FROM deliveries GROUP BY tenant_id`

// deliveryStats sums the deliveries of each group, given the group of each
// tenant id; tenants not in groupOf (the warm-up) are left out.
func deliveryStats(ctx context.Context, dbURL string, groupOf map[string]string) (map[string]groupStats, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, deliveryStatsSQL)
	if err != nil {
		return nil, fmt.Errorf("delivery stats: %w", err)
	}
	out := map[string]groupStats{}
	var tenant string
	var s groupStats
	_, err = pgx.ForEachRow(rows, []any{&tenant, &s.deliveries, &s.attempts, &s.attempted, &s.succeeded, &s.postponedSum, &s.postponedMax}, func() error {
		if g, ok := groupOf[tenant]; ok {
			sum := out[g]
			sum.add(s)
			out[g] = sum
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("delivery stats: %w", err)
	}
	return out, nil
}
