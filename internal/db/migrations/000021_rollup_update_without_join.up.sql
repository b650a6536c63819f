-- The update trigger of deliveries compared each statement's old and new
-- rows by joining the two transition tables on id. PL/pgSQL keeps the plan
-- of that join for the connection, made from the first statements' row
-- counts: after a few one-row updates it is a nested loop, and a later
-- statement of n rows compared n x n pairs. A circuit's release of 20,000
-- parked deliveries spent 48 s in this trigger, and a webhook's deletion
-- cancelling as many would run into the api's statement timeout.
--
-- The trigger no longer joins them. The changed rows are the new rows not
-- among the old (EXCEPT compares whole rows by sorting or hashing, never
-- pair by pair), and the rollups add the new rows' states and subtract the
-- old rows': a row whose counted columns did not change adds nothing. A
-- delivery's webhook, tenant, event and created_at are never updated.
CREATE OR REPLACE FUNCTION deliveries_rollup_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('hookline.rollups', true) IS DISTINCT FROM 'process' THEN
        -- Most updates change nothing a rollup counts (the outbox marking
        -- deliveries enqueued, parkings, attempt counts): one look, and out.
        IF NOT EXISTS (
            SELECT n.id, n.status, n.postponed_count,
                CASE WHEN n.status = 'exhausted' THEN n.completed_at END,
                CASE WHEN n.status = 'exhausted' THEN n.failure_category END
            FROM new_rows n
            EXCEPT
            SELECT o.id, o.status, o.postponed_count,
                CASE WHEN o.status = 'exhausted' THEN o.completed_at END,
                CASE WHEN o.status = 'exhausted' THEN o.failure_category END
            FROM old_rows o) THEN
            RETURN NULL;
        END IF;
        INSERT INTO delivery_rollups AS r (scope_id, hourly, at, shard, created, retrying, succeeded, exhausted, cancelled,
            postponed)
        SELECT s.scope_id, g.hourly, g.at, floor(random() * 4)::smallint, 0,
            sum(c.sign * (c.status = 'retrying')::int), sum(c.sign * (c.status = 'succeeded')::int),
            sum(c.sign * (c.status = 'exhausted')::int), sum(c.sign * (c.status = 'cancelled')::int),
            sum(c.sign * c.postponed_count)
        FROM (SELECT 1 AS sign, n.webhook_id, n.tenant_id, n.created_at, n.status, n.postponed_count FROM new_rows n
              UNION ALL
              SELECT -1, o.webhook_id, o.tenant_id, o.created_at, o.status, o.postponed_count FROM old_rows o) AS c
        CROSS JOIN LATERAL (VALUES (c.webhook_id), (c.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
        CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', c.created_at)), (true, date_trunc('hour', c.created_at, 'UTC')))
            AS g (hourly, at)
        GROUP BY s.scope_id, g.hourly, g.at
        HAVING sum(c.sign * (c.status = 'retrying')::int) <> 0 OR sum(c.sign * (c.status = 'succeeded')::int) <> 0
            OR sum(c.sign * (c.status = 'exhausted')::int) <> 0 OR sum(c.sign * (c.status = 'cancelled')::int) <> 0
            OR sum(c.sign * c.postponed_count) <> 0
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
            SELECT c.tenant_id, date_trunc('hour', coalesce(c.completed_at, now()), 'UTC') AS hour, c.webhook_id, e.event_type,
                coalesce(c.failure_category, 'unknown') AS failure_category, count(*) AS exhausted,
                count(*) FILTER (WHERE EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = c.id)) AS retried
            FROM (SELECT n.id, n.tenant_id, n.webhook_id, n.event_id, n.completed_at, n.failure_category
                  FROM new_rows n WHERE n.status = 'exhausted'
                  EXCEPT
                  SELECT o.id, o.tenant_id, o.webhook_id, o.event_id, o.completed_at, o.failure_category
                  FROM old_rows o WHERE o.status = 'exhausted') AS c
            JOIN events e ON e.id = c.event_id
            GROUP BY 1, 2, 3, 4, 5) AS x),
        (SELECT jsonb_agg(x) FROM (
            SELECT c.tenant_id, date_trunc('hour', coalesce(c.completed_at, now()), 'UTC') AS hour, c.webhook_id, e.event_type,
                coalesce(c.failure_category, 'unknown') AS failure_category, -count(*) AS exhausted,
                -count(*) FILTER (WHERE EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = c.id)) AS retried
            FROM (SELECT o.id, o.tenant_id, o.webhook_id, o.event_id, o.completed_at, o.failure_category
                  FROM old_rows o WHERE o.status = 'exhausted'
                  EXCEPT
                  SELECT n.id, n.tenant_id, n.webhook_id, n.event_id, n.completed_at, n.failure_category
                  FROM new_rows n WHERE n.status = 'exhausted') AS c
            JOIN events e ON e.id = c.event_id
            GROUP BY 1, 2, 3, 4, 5) AS x));
    RETURN NULL;
END $$;
