-- The console's and the portal's webhooks pages show each webhook's last
-- attempt. They found it in delivery_attempts_webhook_idx, one probe per
-- webhook in every daily partition of the attempt log: a page of 50
-- webhooks with 30 days kept read 1,550 index ranges, and more the longer
-- attempts are kept.
--
-- webhook_last_attempts holds the last attempt of each webhook. The worker
-- adds the attempts it tallies once a second (internal/history, Tally);
-- attempts_rollup_insert adds every other attempt, as it does to the
-- rollups. A row is replaced only by a later attempt. Its updates touch no
-- indexed column, so they are HOT and leave nothing for a vacuum.
--
-- Nothing else read delivery_attempts_webhook_idx: it goes, once it has
-- found the last attempts of an existing database, and each attempt
-- writes one index entry fewer.
CREATE TABLE webhook_last_attempts (
    webhook_id  uuid PRIMARY KEY REFERENCES webhooks (id) ON DELETE CASCADE,
    tenant_id   uuid NOT NULL,
    executed_at timestamptz NOT NULL,
    status_code integer,
    error       text
) WITH (fillfactor = 50);

GRANT SELECT ON webhook_last_attempts TO hookline_api;
GRANT SELECT, INSERT, UPDATE ON webhook_last_attempts TO hookline_worker;

-- The attempt log's trigger, as in migration 000012, and the last attempt
-- of each webhook among the rows of the statement.
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

    INSERT INTO webhook_last_attempts AS l (webhook_id, tenant_id, executed_at, status_code, error)
    SELECT DISTINCT ON (n.webhook_id) n.webhook_id, n.tenant_id, n.executed_at, n.status_code, n.error
    FROM new_rows n
    ORDER BY n.webhook_id, n.executed_at DESC
    ON CONFLICT (webhook_id) DO UPDATE SET executed_at = excluded.executed_at, status_code = excluded.status_code,
        error = excluded.error
    WHERE excluded.executed_at > l.executed_at;
    RETURN NULL;
END $$;

-- An existing database: each webhook's last attempt in the attempt log
-- (one index probe per webhook and partition, once).
INSERT INTO webhook_last_attempts (webhook_id, tenant_id, executed_at, status_code, error)
SELECT w.id, w.tenant_id, a.executed_at, a.status_code, a.error
FROM webhooks w
CROSS JOIN LATERAL (
    SELECT executed_at, status_code, error FROM delivery_attempts
    WHERE webhook_id = w.id
    ORDER BY executed_at DESC LIMIT 1) a;

DROP INDEX delivery_attempts_webhook_idx;
