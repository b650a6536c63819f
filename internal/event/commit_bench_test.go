package event

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/history"
)

// BenchmarkPublishCommit is what one group commit costs Postgres: the
// publish statement and its commit for 1, 5 and 25 events of 1 KiB, each
// with one delivery, on one connection. It reports the CPU time of that
// connection's Postgres process (user and system, from /proc: Postgres
// must run on this machine) per commit and per event. What does not grow
// with the events is the part a commit window shares out
// (api.commit_window, docs/BENCHMARKS.md).
//
//	go test -run '^$' -bench PublishCommit ./internal/event/
func BenchmarkPublishCommit(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.New(b)
	tenant := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		VALUES ($1, 'bench', 1000, 100, 1000, 100)`, tenant); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		VALUES ($1, $2, 'https://example.com/hook', '{*}', 'unused', '{}', '{}', '{}')`, uuid.New(), tenant); err != nil {
		b.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	if _, err := backendCPU(pid); err != nil {
		b.Skipf("Postgres's process is not readable here: %v", err)
	}
	log := slog.New(slog.DiscardHandler)
	c := &committer{pool: pool, hot: pool, tally: history.NewTally(pool, log), log: log}
	data := json.RawMessage(`{"pad":"` + strings.Repeat("x", 1000) + `"}`)
	view := &filterView{tenantID: tenant}
	commit := func(events int) {
		batch := make([]*pending, events)
		for i := range batch {
			batch[i] = newPending(tenant, Request{EventType: "bench.created", Data: data, Priority: "normal"}, make([]byte, 32), time.Now())
			batch[i].view = view
		}
		if err := c.exec(ctx, conn.Conn(), batch); err != nil {
			b.Fatal(err)
		}
	}
	for _, events := range []int{1, 5, 25} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			for range 100 {
				commit(events) // the plans cached, as on a running api
			}
			before, _ := backendCPU(pid)
			for b.Loop() {
				commit(events)
			}
			after, _ := backendCPU(pid)
			us := float64((after - before).Microseconds())
			b.ReportMetric(us/float64(b.N), "pg-us/commit")
			b.ReportMetric(us/float64(b.N*events), "pg-us/event")
		})
	}
}

// backendCPU is the CPU time process pid has used (user and system).
func backendCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis, from the state
	// (field 3): utime and stime are fields 14 and 15, in clock ticks of
	// 10 ms.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
