-- The insert trigger as migration 12 left it.
CREATE OR REPLACE FUNCTION deliveries_rollup_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO delivery_rollups AS r (scope_id, hourly, at, shard, created, retrying, succeeded, exhausted, cancelled,
        postponed)
    SELECT s.scope_id, g.hourly, g.at, floor(random() * 4)::smallint, count(*),
        count(*) FILTER (WHERE n.status = 'retrying'), count(*) FILTER (WHERE n.status = 'succeeded'),
        count(*) FILTER (WHERE n.status = 'exhausted'), count(*) FILTER (WHERE n.status = 'cancelled'),
        sum(n.postponed_count)
    FROM new_rows n
    CROSS JOIN LATERAL (VALUES (n.webhook_id), (n.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
    CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', n.created_at)), (true, date_trunc('hour', n.created_at, 'UTC')))
        AS g (hourly, at)
    GROUP BY s.scope_id, g.hourly, g.at
    ORDER BY s.scope_id, g.hourly, g.at
    ON CONFLICT (scope_id, hourly, at, shard) DO UPDATE SET
        created = r.created + excluded.created, retrying = r.retrying + excluded.retrying,
        succeeded = r.succeeded + excluded.succeeded, exhausted = r.exhausted + excluded.exhausted,
        cancelled = r.cancelled + excluded.cancelled, postponed = r.postponed + excluded.postponed;
    -- The DLQ: a delivery stored exhausted, or the first retry of one.
    IF NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.status = 'exhausted' OR n.retry_of IS NOT NULL) THEN
        RETURN NULL;
    END IF;
    PERFORM add_dead_letter_rollups(
        (SELECT jsonb_agg(x) FROM (
            SELECT n.tenant_id, date_trunc('hour', coalesce(n.completed_at, now()), 'UTC') AS hour, n.webhook_id, e.event_type,
                coalesce(n.failure_category, 'unknown') AS failure_category, count(*) AS exhausted, 0 AS retried
            FROM new_rows n JOIN events e ON e.id = n.event_id
            WHERE n.status = 'exhausted'
            GROUP BY 1, 2, 3, 4, 5) AS x),
        -- An exhausted delivery retried for the first time: no other
        -- delivery retries it than those of this statement.
        (SELECT jsonb_agg(x) FROM (
            SELECT o.tenant_id, date_trunc('hour', coalesce(o.completed_at, now()), 'UTC') AS hour, o.webhook_id, e.event_type,
                coalesce(o.failure_category, 'unknown') AS failure_category, 0 AS exhausted, count(*) AS retried
            FROM deliveries o JOIN events e ON e.id = o.event_id
            WHERE o.id IN (SELECT n.retry_of FROM new_rows n WHERE n.retry_of IS NOT NULL)
              AND o.status = 'exhausted'
              AND NOT EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = o.id
                              AND r.id NOT IN (SELECT n.id FROM new_rows n WHERE n.retry_of = o.id))
            GROUP BY 1, 2, 3, 4, 5) AS x));
    RETURN NULL;
END $$;
