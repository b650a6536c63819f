package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hookline/hookline/bench/internal/report"
)

// emit prints the run's tables: the windows' traffic and latency, their
// CPU per delivery, Postgres's by part and by statement, the table sizes,
// and the verdict.
func emit(o options, vacuum string, pg *pgReader, r soakRun, ws *windows) error {
	command := "go run ./bench/soak " + strings.Join(os.Args[1:], " ")
	setup := fmt.Sprintf("The api, worker and dlq binaries built from the working tree, one process each with default settings, on the local Postgres (autovacuum %s), Redis and RabbitMQ; one tenant publishing %d events/s for %s, open-loop with keep-alive clients, to %d webhook(s), each on a receiver of its own in the load program answering 200 at once. Windows of %s.",
		vacuum, o.rate, o.duration, o.webhooks, o.window)
	stats := make([]windowStats, ws.count())
	var lost, dups int64
	for i := range stats {
		stats[i] = ws.stats(i)
		lost += stats[i].lost
		dups += stats[i].duplicates
	}
	uses := make([]cpuUse, ws.count())
	for i := range uses {
		uses[i] = cpuBetween(r.cpu[i], r.cpu[i+1], r.sizes[i+1].delivered-r.sizes[i].delivered)
	}
	tables := []report.Table{
		trafficTable(o, ws, stats, r, setup, lost, dups),
		cpuTable(o, ws, uses),
		pgPartsTable(o, ws, r.pg, uses),
		statementsTable(o, ws, pg, r.pg, uses),
		sizeTable(r.sizes),
		slowestTable(o, ws),
		verdictTable(stats, uses),
	}
	for _, t := range tables {
		t.Command = command
		if err := report.Emit(t, o.record); err != nil {
			return err
		}
	}
	return nil
}

func trafficTable(o options, ws *windows, stats []windowStats, r soakRun, setup string, lost, dups int64) report.Table {
	t := report.Table{
		Title: "Soak: publishing and delivery by window",
		Notes: []string{
			setup,
			fmt.Sprintf("Published %d, accepted (202) %d, refused %d, no answer %d; **lost %d** (accepted, never received by a webhook, counted once every accepted event had arrived or none had for a minute); **duplicates %d**.",
				r.pub.Total, len(r.pub.Accepted), r.pub.Refused, r.pub.Unknown, lost, dups),
			"Publishes, and lost events, count in the window their event was scheduled in; deliveries in the window they arrived in (those after the end of publishing, in the last). Latencies run from each event's scheduled send time: publish, to the api's answer (accepted publishes); receipt, to the receiver having read the POST (first arrivals).",
		},
		Header: []string{"window", "published", "accepted", "publish p50", "publish p99", "received", "receipt p50", "receipt p99", "lost", "duplicates"},
	}
	for i, s := range stats {
		t.Rows = append(t.Rows, []string{windowLabel(ws, i, o), fmt.Sprint(s.published), fmt.Sprint(s.accepted),
			report.Ms(s.publishP50), report.Ms(s.publishP99), fmt.Sprint(s.received),
			report.Ms(s.receiptP50), report.Ms(s.receiptP99), fmt.Sprint(s.lost), fmt.Sprint(s.duplicates)})
	}
	return t
}

func cpuTable(o options, ws *windows, uses []cpuUse) report.Table {
	t := report.Table{
		Title: "Soak: CPU per delivery by window",
		Notes: []string{
			"CPU time from /proc over each window, divided by the deliveries that arrived in it (over every webhook): api, worker and dlq, the processes; postgres, rabbitmq (beam.smp) and redis, every process of each on the machine, whoever it works for; soak, this program (publishing clients and receivers); machine, the busy time of every core from /proc/stat, everyone's work included; rest, the machine's less the groups' (the kernel's work for no process in particular, loopback networking included, and every other process). The last column is the machine's busy cores on average.",
		},
		Header: append(append([]string{"window", "deliveries"}, cpuColumns...), "machine cores"),
	}
	for i, u := range uses {
		t.Rows = append(t.Rows, append([]string{windowLabel(ws, i, o)}, u.row()...))
	}
	return t
}

func sizeTable(snaps []sizeSnapshot) report.Table {
	rows, unchanged := sizeRows(snaps)
	notes := []string{
		"Every table of hookline's database at the start of publishing and at the end of each window, its partitions summed under it: total (pg_total_relation_size: heap, TOAST, free space and visibility maps, indexes), heap (pg_relation_size), indexes (pg_indexes_size), live and dead rows (n_live_tup, n_dead_tup of pg_stat_user_tables). Delivered: deliveries arrived by then.",
		"Bytes per delivery: the total's growth since the start of publishing per delivery arrived since, and its growth within the window per delivery arrived in it. Steady figures: the table grows with the history only; rising ones: faster than the history.",
	}
	if len(unchanged) > 0 {
		notes = append(notes, "Unchanged during the run, not listed: "+strings.Join(unchanged, ", ")+".")
	}
	return report.Table{
		Title:  "Soak: table sizes by window",
		Notes:  notes,
		Header: []string{"table", "at", "delivered", "total", "heap", "indexes", "live rows", "dead rows", "bytes per delivery since the start", "bytes per delivery in the window"},
		Rows:   rows,
	}
}

// slowestSecondsShown is how many of each window's slowest seconds
// slowestTable lists.
const slowestSecondsShown = 3

func slowestTable(o options, ws *windows) report.Table {
	t := report.Table{
		Title: "Soak: the slowest seconds",
		Notes: []string{fmt.Sprintf("In each window, the %d seconds whose events arrived more than %s after their scheduled send most often, in order (each second's start, UTC, by schedule): the moments to look for in the processes' logs (`-logs`) and Postgres's (checkpoints, the worker's analyses and passes), and in whatever else ran on the machine.",
			slowestSecondsShown, report.Ms(lateAfter))},
		Header: []string{"window", "second", "received", "late", "latest"},
	}
	for i, secs := range ws.slowest(slowestSecondsShown) {
		if len(secs) == 0 {
			t.Rows = append(t.Rows, []string{windowLabel(ws, i, o), "none late", "", "", ""})
		}
		for _, s := range secs {
			t.Rows = append(t.Rows, []string{windowLabel(ws, i, o), s.at.UTC().Format("15:04:05.000"), fmt.Sprint(s.received),
				fmt.Sprint(s.late), report.Ms(s.worst)})
		}
	}
	return t
}

func verdictTable(stats []windowStats, uses []cpuUse) report.Table {
	first, last := 0, len(stats)-1
	t := report.Table{
		Title:  "Soak: verdict",
		Notes:  []string{fmt.Sprintf("The last window against the first (which includes the system's first minutes: empty caches, first plans); steady when the ratio is within %.0f %% of 1 either way. System CPU: the api's, the worker's, the dlq's, Postgres's, RabbitMQ's and Redis's together, which other work on a shared machine changes less than the machine's (see the CPU table's rest).", tolerance*100)},
		Header: []string{"figure", "first window", "last window", "last / first", fmt.Sprintf("within %.0f %%", tolerance*100)},
	}
	if first == last {
		t.Notes = append(t.Notes, "One window only: nothing to compare.")
	}
	add := func(name string, a, b float64, text func(float64) string) {
		ratio, within, ok := compare(a, b)
		row := []string{name, text(a), text(b), "-", "-"}
		if ok && first != last {
			row[3], row[4] = fmt.Sprintf("%.2f", ratio), map[bool]string{true: "yes", false: "no"}[within]
		}
		t.Rows = append(t.Rows, row)
	}
	add("receipt p99", float64(stats[first].receiptP99), float64(stats[last].receiptP99),
		func(v float64) string { return fmt.Sprintf("%.2f ms", v/1e6) })
	us := func(v float64) string { return fmt.Sprintf("%.0f us", v) }
	add("machine CPU per delivery", uses[first].perDelivery("machine"), uses[last].perDelivery("machine"), us)
	add("system CPU per delivery", uses[first].systemPerDelivery(), uses[last].systemPerDelivery(), us)
	return t
}

// windowLabel names window i by its bounds, "10m-20m".
func windowLabel(ws *windows, i int, o options) string {
	from, to := ws.bounds(i, o.duration)
	return short(from) + "-" + short(to)
}

func pgPartsTable(o options, ws *windows, samples []pgSample, uses []cpuUse) report.Table {
	parts := make([]map[string]time.Duration, len(uses))
	names := map[string]bool{}
	for i, u := range uses {
		parts[i] = pgParts(samples[i], samples[i+1], u.used["postgres"])
		for name := range parts[i] {
			names[name] = true
		}
	}
	columns := slices.Sorted(maps.Keys(names))
	t := report.Table{
		Title: "Soak: Postgres CPU per delivery by process",
		Notes: []string{"Each Postgres process's CPU time from /proc over each window, divided by the deliveries that arrived in it, by what pg_stat_activity says the process is: a client of the run's database by its application_name (each hookline process names its connections), a background process by its type. " +
			pgUnattributed + ": the postgres column of the CPU table less the processes read at both ends of the window (or started within it). " +
			"The last columns are the server's, whoever caused them (pg_stat_bgwriter, pg_stat_wal): its checkpoints in the window, timed (checkpoint_timeout) and requested (the WAL's size reaching max_wal_size, or a command such as CREATE DATABASE), and the WAL it wrote per delivery."},
		Header: append(append([]string{"window", "postgres"}, columns...), "checkpoints timed / requested", "WAL per delivery"),
	}
	for i, u := range uses {
		row := []string{windowLabel(ws, i, o), fmt.Sprintf("%.0f us", u.perDelivery("postgres"))}
		for _, name := range columns {
			row = append(row, fmt.Sprintf("%.0f us", perDelivery(parts[i][name], u.deliveries)))
		}
		timed, requested, wal := serverBetween(samples[i], samples[i+1], u.deliveries)
		row = append(row, fmt.Sprintf("%d / %d", timed, requested), fmt.Sprintf("%.0f B", wal))
		t.Rows = append(t.Rows, row)
	}
	return t
}

// statementsShown is how many statements the statements table lists.
const statementsShown = 15

func statementsTable(o options, ws *windows, pg *pgReader, samples []pgSample, uses []cpuUse) report.Table {
	t := report.Table{Title: "Soak: Postgres statements by window"}
	if !pg.statements {
		t.Notes = []string{"Not read: " + pg.why + "."}
		return t
	}
	deltas := make([]map[int64]statementDelta, len(uses))
	for i := range uses {
		deltas[i] = statementsBetween(samples[i], samples[i+1])
	}
	t.Notes = []string{fmt.Sprintf("pg_stat_statements of the run's database (top-level statements), the %d that took the most execution time over the run, most first. Each window: execution time per delivery arrived in it, then shared buffers (hit or read) per call; the last column is the calls per delivery over the run. Execution time excludes parsing, planning and the commit.", statementsShown)}
	t.Header = []string{"statement"}
	for i := range uses {
		t.Header = append(t.Header, windowLabel(ws, i, o))
	}
	t.Header = append(t.Header, "calls per delivery")
	var delivered int64
	for _, u := range uses {
		delivered += u.deliveries
	}
	for _, id := range topStatements(deltas, statementsShown) {
		var text string
		var calls int64
		row := []string{""}
		for i, u := range uses {
			d, ok := deltas[i][id]
			if !ok {
				row = append(row, "-")
				continue
			}
			text, calls = d.text, calls+d.calls
			row = append(row, fmt.Sprintf("%.1f us, %.1f buffers", perDelivery(time.Duration(d.execMs*float64(time.Millisecond)), u.deliveries), float64(d.blocks)/float64(d.calls)))
		}
		row[0] = "`" + statementText(text, 90) + "`"
		row = append(row, fmt.Sprintf("%.3f", float64(calls)/float64(max(delivered, 1))))
		t.Rows = append(t.Rows, row)
	}
	return t
}

// perDelivery is d in microseconds per delivery, 0 without deliveries.
func perDelivery(d time.Duration, deliveries int64) float64 {
	if deliveries <= 0 {
		return 0
	}
	return float64(d.Nanoseconds()) / 1e3 / float64(deliveries)
}
