-- The update trigger as migration 14 left it.
CREATE OR REPLACE FUNCTION deliveries_rollup_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('hookline.rollups', true) IS DISTINCT FROM 'process' THEN
        -- Most updates change nothing a rollup counts (the outbox marking
        -- deliveries enqueued, parkings, attempt counts): one look, and out.
        IF NOT EXISTS (SELECT 1 FROM new_rows n JOIN old_rows o ON o.id = n.id
                       WHERE n.status <> o.status OR n.postponed_count <> o.postponed_count
                          OR (o.status = 'exhausted' AND (o.completed_at IS DISTINCT FROM n.completed_at
                              OR o.failure_category IS DISTINCT FROM n.failure_category))) THEN
            RETURN NULL;
        END IF;
        INSERT INTO delivery_rollups AS r (scope_id, hourly, at, shard, created, retrying, succeeded, exhausted, cancelled,
            postponed)
        SELECT s.scope_id, g.hourly, g.at, floor(random() * 4)::smallint, 0,
            sum((n.status = 'retrying')::int - (o.status = 'retrying')::int),
            sum((n.status = 'succeeded')::int - (o.status = 'succeeded')::int),
            sum((n.status = 'exhausted')::int - (o.status = 'exhausted')::int),
            sum((n.status = 'cancelled')::int - (o.status = 'cancelled')::int),
            sum(n.postponed_count - o.postponed_count)
        FROM new_rows n JOIN old_rows o ON o.id = n.id
        CROSS JOIN LATERAL (VALUES (n.webhook_id), (n.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
        CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', n.created_at)), (true, date_trunc('hour', n.created_at, 'UTC')))
            AS g (hourly, at)
        WHERE n.status <> o.status OR n.postponed_count <> o.postponed_count
        GROUP BY s.scope_id, g.hourly, g.at
        ORDER BY s.scope_id, g.hourly, g.at
        ON CONFLICT (scope_id, hourly, at, shard) DO UPDATE SET
            created = r.created + excluded.created, retrying = r.retrying + excluded.retrying,
            succeeded = r.succeeded + excluded.succeeded, exhausted = r.exhausted + excluded.exhausted,
            cancelled = r.cancelled + excluded.cancelled, postponed = r.postponed + excluded.postponed;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM new_rows n WHERE n.status = 'exhausted') THEN
        RETURN NULL;
    END IF;
    -- A delivery entering the DLQ counts at its key; one already in it
    -- whose key changed (an operator correcting completed_at or the
    -- category) moves from the old key to the new.
    PERFORM add_dead_letter_rollups(
        (SELECT jsonb_agg(x) FROM (
            SELECT n.tenant_id, date_trunc('hour', coalesce(n.completed_at, now()), 'UTC') AS hour, n.webhook_id, e.event_type,
                coalesce(n.failure_category, 'unknown') AS failure_category, count(*) AS exhausted,
                count(*) FILTER (WHERE EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = n.id)) AS retried
            FROM new_rows n JOIN old_rows o ON o.id = n.id JOIN events e ON e.id = n.event_id
            WHERE n.status = 'exhausted' AND (o.status <> 'exhausted' OR o.completed_at IS DISTINCT FROM n.completed_at
                OR o.failure_category IS DISTINCT FROM n.failure_category)
            GROUP BY 1, 2, 3, 4, 5) AS x),
        (SELECT jsonb_agg(x) FROM (
            SELECT o.tenant_id, date_trunc('hour', coalesce(o.completed_at, now()), 'UTC') AS hour, o.webhook_id, e.event_type,
                coalesce(o.failure_category, 'unknown') AS failure_category, -count(*) AS exhausted,
                -count(*) FILTER (WHERE EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = o.id)) AS retried
            FROM new_rows n JOIN old_rows o ON o.id = n.id JOIN events e ON e.id = o.event_id
            WHERE o.status = 'exhausted' AND (n.status <> 'exhausted' OR o.completed_at IS DISTINCT FROM n.completed_at
                OR o.failure_category IS DISTINCT FROM n.failure_category)
            GROUP BY 1, 2, 3, 4, 5) AS x));
    RETURN NULL;
END $$;
