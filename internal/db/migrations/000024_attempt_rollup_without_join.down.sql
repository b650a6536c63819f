CREATE OR REPLACE FUNCTION attempts_rollup_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    WITH scoped AS (
        SELECT s.scope_id, g.hourly, g.at, n.status_code BETWEEN 200 AND 299 AS ok,
            n.failure_category, latency_bucket(n.duration_ms) AS bucket, n.executed_at
        FROM new_rows n
        CROSS JOIN LATERAL (VALUES (n.webhook_id), (n.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
        CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', n.executed_at)), (true, date_trunc('hour', n.executed_at, 'UTC')))
            AS g (hourly, at)
    ), totals AS (
        SELECT scope_id, hourly, at, count(*) AS attempts, count(*) FILTER (WHERE ok) AS successes,
            max(executed_at) FILTER (WHERE ok) AS last_success_at
        FROM scoped GROUP BY 1, 2, 3
    ), latency AS (
        SELECT scope_id, hourly, at, jsonb_object_agg(bucket, n) AS latency
        FROM (SELECT scope_id, hourly, at, bucket, count(*) AS n FROM scoped GROUP BY 1, 2, 3, 4) AS b GROUP BY 1, 2, 3
    ), errors AS (
        SELECT scope_id, hourly, at, jsonb_object_agg(failure_category, n) AS errors
        FROM (SELECT scope_id, hourly, at, failure_category, count(*) AS n FROM scoped
              WHERE failure_category IS NOT NULL GROUP BY 1, 2, 3, 4) AS f GROUP BY 1, 2, 3
    )
    INSERT INTO attempt_rollups AS r (scope_id, hourly, at, shard, attempts, successes, errors, latency, last_success_at)
    SELECT t.scope_id, t.hourly, t.at, floor(random() * 4)::smallint, t.attempts, t.successes, coalesce(e.errors, '{}'),
        l.latency, t.last_success_at
    FROM totals t JOIN latency l USING (scope_id, hourly, at) LEFT JOIN errors e USING (scope_id, hourly, at)
    ORDER BY t.scope_id, t.hourly, t.at
    ON CONFLICT (scope_id, hourly, at, shard) DO UPDATE SET
        attempts = r.attempts + excluded.attempts, successes = r.successes + excluded.successes,
        errors = CASE WHEN excluded.errors = '{}' THEN r.errors ELSE jsonb_add_counts(r.errors, excluded.errors) END,
        latency = jsonb_add_counts(r.latency, excluded.latency),
        last_success_at = greatest(r.last_success_at, excluded.last_success_at);
    RETURN NULL;
END $$;
