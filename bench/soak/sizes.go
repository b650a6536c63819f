package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// sizesSQL reads the size of every table of the database with its
// indexes and TOAST, the partitions of a partitioned table summed under
// their root (which has no storage of its own), and the live and dead
// rows the statistics count.
const sizesSQL = `
SELECT coalesce(pg_partition_root(c.oid), c.oid)::regclass::text AS name,
       sum(pg_total_relation_size(c.oid))::bigint,
       sum(pg_relation_size(c.oid))::bigint,
       sum(pg_indexes_size(c.oid))::bigint,
       sum(coalesce(s.n_live_tup, 0))::bigint,
       sum(coalesce(s.n_dead_tup, 0))::bigint
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relkind IN ('r', 'm')
  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg_toast%'
GROUP BY 1`

// tableSize is a table's size at a moment, in bytes and rows.
type tableSize struct {
	total   int64 // pg_total_relation_size: heap, TOAST, free space and visibility maps, indexes
	heap    int64 // pg_relation_size: the main fork
	indexes int64 // pg_indexes_size
	live    int64 // n_live_tup
	dead    int64 // n_dead_tup
}

// sizeSnapshot is every table's size at a moment of the run.
type sizeSnapshot struct {
	at        time.Duration // from the start of publishing
	delivered int64         // deliveries arrived by then
	tables    map[string]tableSize
}

// readSizes reads every table's size in the database at url.
func readSizes(ctx context.Context, url string) (map[string]tableSize, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("read table sizes: %w", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, sizesSQL)
	if err != nil {
		return nil, fmt.Errorf("read table sizes: %w", err)
	}
	tables := map[string]tableSize{}
	var name string
	var s tableSize
	_, err = pgx.ForEachRow(rows, []any{&name, &s.total, &s.heap, &s.indexes, &s.live, &s.dead}, func() error {
		tables[name] = s
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read table sizes: %w", err)
	}
	return tables, nil
}

// allTables names the sum of every table in the size rows.
const allTables = "all tables"

// sizeRows turns the snapshots, in order, into the size table's rows: for
// every table whose total size changed during the run, and for all tables
// together, a row per snapshot with its sizes, its growth since the first
// snapshot per delivery arrived since, and its growth since the previous
// snapshot per delivery arrived meanwhile. It also returns the tables
// that did not change.
func sizeRows(snaps []sizeSnapshot) (rows [][]string, unchanged []string) {
	if len(snaps) == 0 {
		return nil, nil
	}
	first, last := snaps[0], snaps[len(snaps)-1]
	var changed []string
	for _, name := range slices.Sorted(maps.Keys(last.tables)) {
		if last.tables[name] == first.tables[name] {
			unchanged = append(unchanged, name)
		} else {
			changed = append(changed, name)
		}
	}
	for _, name := range append(changed, allTables) {
		prev := first
		for _, snap := range snaps {
			size, base := sizeOf(snap, name), sizeOf(first, name)
			rows = append(rows, []string{name, short(snap.at), fmt.Sprint(snap.delivered),
				bytesText(size.total), bytesText(size.heap), bytesText(size.indexes),
				fmt.Sprint(size.live), fmt.Sprint(size.dead),
				bytesPerDelivery(size.total-base.total, snap.delivered-first.delivered),
				bytesPerDelivery(size.total-sizeOf(prev, name).total, snap.delivered-prev.delivered)})
			prev = snap
		}
	}
	return rows, unchanged
}

// sizeOf returns table name's size in snap, or the sum of all tables'.
func sizeOf(snap sizeSnapshot, name string) tableSize {
	if name != allTables {
		return snap.tables[name]
	}
	var sum tableSize
	for _, s := range snap.tables {
		sum.total += s.total
		sum.heap += s.heap
		sum.indexes += s.indexes
		sum.live += s.live
		sum.dead += s.dead
	}
	return sum
}

// bytesPerDelivery formats bytes per delivery, "-" without deliveries.
func bytesPerDelivery(bytes, deliveries int64) string {
	if deliveries <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(bytes)/float64(deliveries))
}

// bytesText formats a size in kB, MB or GB (powers of 1024, as Postgres's
// pg_size_pretty).
func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%d kB", n>>10)
	}
}

// short formats a moment of the run in minutes when it is whole minutes
// ("10m"), else as time.Duration does.
func short(d time.Duration) string {
	d = d.Round(time.Second)
	if d%time.Minute == 0 {
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}

// autovacuum returns the server's autovacuum setting, "on" or "off".
func autovacuum(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", fmt.Errorf("show autovacuum: %w", err)
	}
	defer conn.Close(context.Background())
	var setting string
	if err := conn.QueryRow(ctx, "SHOW autovacuum").Scan(&setting); err != nil {
		return "", fmt.Errorf("show autovacuum: %w", err)
	}
	return setting, nil
}
