package wire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/db/dbtest"
	"github.com/hookline/hookline/internal/wire"
)

// A lookup of deliveries by a batch of ids made within seconds reads the
// week they fall in and no other, also from a generic plan, as the hot
// paths run theirs; = ANY of the array alone reads every week's.
func TestIDsInReadsTheWeekOfTheIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.New(t)
	tenant, hook := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	_, err := pool.Exec(ctx, `INSERT INTO tenants (id, name, rate_limit_rpm, rate_limit_burst, publish_rps, publish_burst)
		VALUES ($1, 't', 1, 1, 1, 1)`, tenant)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO webhooks (id, tenant_id, url, events, secret, retry_config, circuit_breaker_config, rate_limit)
		VALUES ($2, $1, 'http://example.com/', '{*}', 's', '{}', '{}', '{}')`, tenant, hook)
	require.NoError(t, err)
	// Deliveries of now and of next week (its partition is made ahead).
	_, err = pool.Exec(ctx, `INSERT INTO deliveries (id, tenant_id, event_id, webhook_id, priority)
		SELECT CASE WHEN n % 2 = 0 THEN uuidv7() ELSE uuidv7_floor(now() + interval '7 days' + n * interval '1 ms') END,
		       $1, uuidv7(), $2, 'normal'
		FROM generate_series(1, 20) n`, tenant, hook)
	require.NoError(t, err)
	var now, later []uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(id) FILTER (WHERE id < uuidv7_floor(now() + interval '1 day')),
		array_agg(id) FILTER (WHERE id > uuidv7_floor(now() + interval '1 day')) FROM deliveries`).Scan(&now, &later))
	require.Len(t, now, 10)
	require.Len(t, later, 10)
	var weekOfNow, weekOfLater string
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT tableoid::regclass::text FROM deliveries WHERE id = $1),
		(SELECT tableoid::regclass::text FROM deliveries WHERE id = $2)`, now[0], later[0]).Scan(&weekOfNow, &weekOfLater))
	require.NotEqual(t, weekOfNow, weekOfLater)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	literal := func(ids []uuid.UUID) string {
		s := make([]string, len(ids))
		for i, id := range ids {
			s[i] = id.String()
		}
		return "{" + strings.Join(s, ",") + "}"
	}
	// A statement prepared in SQL, so that EXPLAIN shows the plan its
	// executions use, not one made for the values given.
	prepared := 0
	read := func(cond string, ids []uuid.UUID) (partitions []string) {
		t.Helper()
		prepared++
		name := fmt.Sprintf("ids_%d", prepared)
		_, err := conn.Exec(ctx, `PREPARE `+name+`(uuid[]) AS SELECT id FROM deliveries WHERE `+strings.ReplaceAll(cond, "::uuid[]", ""))
		require.NoError(t, err)
		var plan string
		require.NoError(t, conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE `+name+`('`+literal(ids)+`')`).Scan(&plan))
		var nodes []struct{ Plan planNode }
		require.NoError(t, json.Unmarshal([]byte(plan), &nodes))
		var walk func(n planNode)
		walk = func(n planNode) {
			if strings.HasPrefix(n.Relation, "deliveries_") && n.Loops > 0 {
				partitions = append(partitions, n.Relation)
			}
			for _, c := range n.Plans {
				walk(c)
			}
		}
		walk(nodes[0].Plan)
		return partitions
	}
	require.Contains(t, read(`id = ANY($1::uuid[])`, later), weekOfNow, "= ANY alone reads every week")
	require.Contains(t, read(`id = ANY($1::uuid[])`, now), weekOfLater, "= ANY alone reads every week")
	require.Equal(t, []string{weekOfLater}, read(wire.IDsIn("id", "$1"), later))
	require.Equal(t, []string{weekOfNow}, read(wire.IDsIn("id", "$1"), now))
}

type planNode struct {
	Relation string     `json:"Relation Name"`
	Loops    int        `json:"Actual Loops"`
	Plans    []planNode `json:"Plans"`
}
