package history

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
)

// A webhook's deliveries of a rare event type are found from the type's
// events, and each event's deliveries are looked up in the weeks from the
// event's own to its latest delivery's: the weeks before it are not read,
// however many there are, nor the weeks after for an event whose
// deliveries were all made with it. The deliveries of an event made later
// (a retry, here) are found: the retry marks its event.
func TestListOfAnEventTypeReadsTheWeeksFromItsEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	// Weeks of deliveries from five weeks ago, as a deployment that old has
	// them.
	exec(`ALTER TABLE deliveries DETACH PARTITION deliveries_before`)
	exec(`DROP TABLE deliveries_before`)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	monday := today.AddDate(0, 0, -((int(today.Weekday())+6)%7)-35)
	var weeks []string
	for ; monday.Before(today); monday = monday.AddDate(0, 0, 7) {
		name := "deliveries_" + monday.Format("20060102")
		weeks = append(weeks, name)
		exec(fmt.Sprintf(`DO $$ BEGIN
    IF to_regclass('%[1]s') IS NULL THEN
        CREATE TABLE %[1]s PARTITION OF deliveries FOR VALUES FROM (uuidv7_floor('%[2]s')) TO (uuidv7_floor('%[3]s'));
    END IF;
END $$`, name, monday.Format(time.RFC3339), monday.AddDate(0, 0, 7).Format(time.RFC3339)))
	}
	s := dbtest.Seed(t, pool, 1)
	hook := s.Webhooks[0]
	// A common type every two minutes of the five weeks; the rare one
	// twice, two weeks ago, once retried this week.
	exec(`INSERT INTO events (id, tenant_id, event_type, idempotency_key, request_hash, priority, data, created_at)
		SELECT uuidv7_floor(t), $1, CASE WHEN n IN (12000, 12001) THEN 'rare' ELSE 'common' END, 'k' || n, '\x00', 'normal', '{}', t
		FROM generate_series(1, 25200) n, LATERAL (SELECT now() - interval '35 days' + n * interval '2 minutes' AS t) x`, s.Tenant)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, created_at)
		SELECT uuidv7_floor(e.created_at + interval '1 ms'), e.tenant_id, e.id, $2, 'normal', 'succeeded', e.created_at
		FROM events e WHERE e.tenant_id = $1`, s.Tenant, hook)
	exec(`INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority, status, retry_of)
		SELECT uuidv7(), e.tenant_id, e.id, $2, 'normal', 'pending', d.id
		FROM events e JOIN deliveries d ON d.event_id = e.id WHERE e.tenant_id = $1 AND e.idempotency_key = 'k12001'`,
		s.Tenant, hook)
	exec(`ANALYZE events`)
	exec(`ANALYZE deliveries`)

	rare := "rare"
	got, err := NewReader(pool).List(ctx, s.Tenant, hook, ListFilter{EventType: &rare, Limit: 50})
	require.NoError(t, err)
	require.Len(t, got, 3)
	var eventWeek string
	require.NoError(t, pool.QueryRow(ctx, `SELECT d.tableoid::regclass::text FROM deliveries d JOIN events e ON e.id = d.event_id
		WHERE e.idempotency_key = 'k12000'`).Scan(&eventWeek))

	var plan string
	lower, upper := IDBounds(nil, nil)
	require.NoError(t, pool.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+listDeliveriesSQL, hook, s.Tenant, nil, nil, rare,
		nil, nil, 50, lower, upper, nil).Scan(&plan))
	var nodes []struct{ Plan planNode }
	require.NoError(t, json.Unmarshal([]byte(plan), &nodes))
	read := map[string]int{}
	var walk func(n planNode)
	walk = func(n planNode) {
		if strings.HasPrefix(n.Relation, "deliveries_") {
			read[n.Relation] += n.Loops
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(nodes[0].Plan)
	for _, w := range weeks {
		require.Contains(t, read, w, "the plan names every week")
		require.Equal(t, w >= eventWeek, read[w] > 0, "%s is read from the week of %s on", w, eventWeek)
	}
	thisWeek := weeks[len(weeks)-1]
	require.Greater(t, thisWeek, eventWeek)
	require.Equal(t, 1, read[thisWeek], "this week, where the retry is, read for the retried event only")
}

type planNode struct {
	Relation string     `json:"Relation Name"`
	Loops    int        `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}
