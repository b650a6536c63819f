-- Summaries that cost the same whatever the length of the history
-- (docs/DATA.md, "Rollups"). Stats, health, charts and DLQ counts read
-- these rollups, kept by statement-level triggers as the rows they summarise
-- are written: one upsert per statement and summary row, whatever path
-- (api, worker, dlq, an operator's SQL) wrote them, inside the writer's
-- transaction, so that a rollup never counts what was rolled back.
--
-- A rollup row is keyed by a scope (a webhook, a tenant, or the nil uuid
-- for every tenant together), a period (a minute, or an hour when hourly)
-- starting at at, and a shard. Every change is added to its minute and to
-- its hour, so that a day is read as 24 hourly rows and the minutes at its
-- edges. Each statement adds to one of four shards picked at random, so
-- that concurrent writers of one busy tenant's minute rarely wait on each
-- other's row locks; a reader sums the shards.

-- latency_bucket is the histogram bucket of a duration in milliseconds:
-- one bucket per millisecond below 16 ms, then eight per doubling (each
-- about 9 % wide). internal/history/latency.go holds the same formula and
-- turns bucket counts back into percentiles.
CREATE FUNCTION latency_bucket(ms integer) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN ms < 16 THEN greatest(ms, 0)
                ELSE 16 + floor(8 * ln(ms::float8 / 16) / ln(2::float8))::integer END
$$;

-- jsonb_add_counts adds two objects of counts ({"key": n}) key by key.
CREATE FUNCTION jsonb_add_counts(a jsonb, b jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_object_agg(k, n), '{}') FROM (
        SELECT k, sum(v::bigint) AS n
        FROM (SELECT * FROM jsonb_each_text(a) UNION ALL SELECT * FROM jsonb_each_text(b)) AS x (k, v)
        GROUP BY k) AS y
$$;

-- Deliveries by the period they were created in, by their state now: created
-- counts them all, the others those in that state (pending is what is
-- left); postponed sums their postponements.
CREATE TABLE delivery_rollups (
    scope_id   uuid NOT NULL,
    hourly     boolean NOT NULL,
    at         timestamptz NOT NULL,
    shard      smallint NOT NULL,
    created    bigint NOT NULL DEFAULT 0,
    retrying   bigint NOT NULL DEFAULT 0,
    succeeded  bigint NOT NULL DEFAULT 0,
    exhausted  bigint NOT NULL DEFAULT 0,
    cancelled  bigint NOT NULL DEFAULT 0,
    postponed  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (scope_id, hourly, at, shard)
);

-- Attempts by the period they were executed in: how many, how many answered
-- 2xx, failures by category ({"timeout": n, ...}), durations as a
-- histogram of latency_bucket ({"<bucket>": n}), and the last success.
CREATE TABLE attempt_rollups (
    scope_id         uuid NOT NULL,
    hourly           boolean NOT NULL,
    at               timestamptz NOT NULL,
    shard            smallint NOT NULL,
    attempts         bigint NOT NULL DEFAULT 0,
    successes        bigint NOT NULL DEFAULT 0,
    errors           jsonb NOT NULL DEFAULT '{}',
    latency          jsonb NOT NULL DEFAULT '{}',
    last_success_at  timestamptz,
    PRIMARY KEY (scope_id, hourly, at, shard)
);

-- The DLQ by tenant, UTC day (and hour, when hourly) of exhaustion,
-- webhook, event type and failure category, and in all (a row at
-- -infinity, not hourly) whatever the time: exhausted counts the exhausted
-- deliveries, retried those of them that have been retried since (which
-- the DLQ hides by default).
CREATE TABLE dead_letter_rollups (
    tenant_id         uuid NOT NULL,
    hourly            boolean NOT NULL,
    at                timestamptz NOT NULL,
    webhook_id        uuid NOT NULL,
    event_type        text NOT NULL,
    failure_category  text NOT NULL,
    exhausted         bigint NOT NULL DEFAULT 0,
    retried           bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, hourly, at, webhook_id, event_type, failure_category)
);

-- The triggers of deliveries. A statement that changes no state and no
-- postponement (the outbox marking rows enqueued, a parking) adds nothing.
CREATE FUNCTION deliveries_rollup_insert() RETURNS trigger
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

CREATE FUNCTION deliveries_rollup_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
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

-- A deleted delivery (retention) leaves the DLQ's counts, and a deleted
-- retry that was its original's only one puts the original back in the
-- DLQ; the delivery rollups keep both, as history. Row by row and before
-- the delete, while the links between retries and originals (which the
-- delete sets NULL) can still be read; only exhausted deliveries and
-- retries fire it. A delivery deleted with its event (its tenant deleted)
-- leaves nothing to count.
CREATE FUNCTION deliveries_rollup_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status = 'exhausted' THEN
        PERFORM add_dead_letter_rollups(
            (SELECT jsonb_agg(x) FROM (
                SELECT OLD.tenant_id, date_trunc('hour', coalesce(OLD.completed_at, now()), 'UTC') AS hour,
                    OLD.webhook_id, e.event_type, coalesce(OLD.failure_category, 'unknown') AS failure_category,
                    -1 AS exhausted,
                    -(EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = OLD.id))::int AS retried
                FROM events e WHERE e.id = OLD.event_id) AS x),
            NULL);
    END IF;
    IF OLD.retry_of IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = OLD.retry_of AND r.id <> OLD.id) THEN
        PERFORM add_dead_letter_rollups(
            (SELECT jsonb_agg(x) FROM (
                SELECT o.tenant_id, date_trunc('hour', coalesce(o.completed_at, now()), 'UTC') AS hour,
                    o.webhook_id, e.event_type, coalesce(o.failure_category, 'unknown') AS failure_category,
                    0 AS exhausted, -1 AS retried
                FROM deliveries o JOIN events e ON e.id = o.event_id
                WHERE o.id = OLD.retry_of AND o.status = 'exhausted') AS x),
            NULL);
    END IF;
    RETURN OLD;
END $$;

-- add_dead_letter_rollups adds both sets of rows (either may be NULL), each
-- to its hour, its day and the all-time row.
CREATE FUNCTION add_dead_letter_rollups(a jsonb, b jsonb) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF a IS NULL AND b IS NULL THEN
        RETURN;
    END IF;
    INSERT INTO dead_letter_rollups AS r (tenant_id, hourly, at, webhook_id, event_type, failure_category, exhausted, retried)
    SELECT c.tenant_id, g.hourly, g.at, c.webhook_id, c.event_type, c.failure_category, sum(c.exhausted), sum(c.retried)
    FROM jsonb_to_recordset(coalesce(a, '[]') || coalesce(b, '[]')) AS c (tenant_id uuid, hour timestamptz, webhook_id uuid,
        event_type text, failure_category text, exhausted bigint, retried bigint)
    CROSS JOIN LATERAL (VALUES (true, c.hour), (false, date_trunc('day', c.hour, 'UTC')), (false, '-infinity'::timestamptz))
        AS g (hourly, at)
    GROUP BY 1, 2, 3, 4, 5, 6
    ORDER BY 1, 2, 3, 4, 5, 6
    ON CONFLICT (tenant_id, hourly, at, webhook_id, event_type, failure_category) DO UPDATE SET
        exhausted = r.exhausted + excluded.exhausted, retried = r.retried + excluded.retried;
END $$;

CREATE TRIGGER deliveries_rollup_insert AFTER INSERT ON deliveries
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION deliveries_rollup_insert();
CREATE TRIGGER deliveries_rollup_update AFTER UPDATE ON deliveries
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION deliveries_rollup_update();
CREATE TRIGGER deliveries_rollup_delete BEFORE DELETE ON deliveries
    FOR EACH ROW WHEN (OLD.status = 'exhausted' OR OLD.retry_of IS NOT NULL)
    EXECUTE FUNCTION deliveries_rollup_delete();

-- The attempt log's trigger: each attempt counts for its webhook, its
-- tenant and everyone, in the minute and the hour it was executed.
CREATE FUNCTION attempts_rollup_insert() RETURNS trigger
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

CREATE TRIGGER attempts_rollup_insert AFTER INSERT ON delivery_attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION attempts_rollup_insert();

-- An existing database: the rollups of the history it already has. The
-- attempts and deliveries that retention already removed are not counted.
INSERT INTO delivery_rollups (scope_id, hourly, at, shard, created, retrying, succeeded, exhausted, cancelled, postponed)
SELECT s.scope_id, g.hourly, g.at, 0, count(*),
    count(*) FILTER (WHERE d.status = 'retrying'), count(*) FILTER (WHERE d.status = 'succeeded'),
    count(*) FILTER (WHERE d.status = 'exhausted'), count(*) FILTER (WHERE d.status = 'cancelled'),
    sum(d.postponed_count)
FROM deliveries d
CROSS JOIN LATERAL (VALUES (d.webhook_id), (d.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', d.created_at)), (true, date_trunc('hour', d.created_at, 'UTC')))
    AS g (hourly, at)
GROUP BY 1, 2, 3;

WITH scoped AS (
    SELECT s.scope_id, g.hourly, g.at, a.status_code BETWEEN 200 AND 299 AS ok,
        a.failure_category, latency_bucket(a.duration_ms) AS bucket, a.executed_at
    FROM (SELECT webhook_id, tenant_id, executed_at, status_code, failure_category, duration_ms FROM delivery_attempts
          UNION ALL
          SELECT webhook_id, tenant_id, executed_at, status_code, failure_category, duration_ms FROM delivery_attempts_retained) AS a
    CROSS JOIN LATERAL (VALUES (a.webhook_id), (a.tenant_id), ('00000000-0000-0000-0000-000000000000'::uuid)) AS s (scope_id)
    CROSS JOIN LATERAL (VALUES (false, date_trunc('minute', a.executed_at)), (true, date_trunc('hour', a.executed_at, 'UTC')))
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
INSERT INTO attempt_rollups (scope_id, hourly, at, shard, attempts, successes, errors, latency, last_success_at)
SELECT t.scope_id, t.hourly, t.at, 0, t.attempts, t.successes, coalesce(e.errors, '{}'), l.latency, t.last_success_at
FROM totals t JOIN latency l USING (scope_id, hourly, at) LEFT JOIN errors e USING (scope_id, hourly, at);

INSERT INTO dead_letter_rollups (tenant_id, hourly, at, webhook_id, event_type, failure_category, exhausted, retried)
SELECT d.tenant_id, g.hourly, g.at, d.webhook_id, e.event_type, coalesce(d.failure_category, 'unknown'), count(*),
    count(*) FILTER (WHERE EXISTS (SELECT 1 FROM deliveries r WHERE r.retry_of = d.id))
FROM deliveries d JOIN events e ON e.id = d.event_id
CROSS JOIN LATERAL (VALUES (true, date_trunc('hour', coalesce(d.completed_at, now()), 'UTC')),
    (false, date_trunc('day', coalesce(d.completed_at, now()), 'UTC')), (false, '-infinity'::timestamptz)) AS g (hourly, at)
WHERE d.status = 'exhausted'
GROUP BY 1, 2, 3, 4, 5, 6;

-- The all-time DLQ rows of every tenant, for the admin's stats and the
-- dlq's gauge, without reading the hourly and daily rows.
CREATE INDEX dead_letter_rollups_all_time_idx ON dead_letter_rollups (tenant_id) WHERE at = '-infinity';

-- A webhook's DLQ, in the order it lists it, without reading the rest of
-- its tenant's.
CREATE INDEX deliveries_webhook_dead_letter_idx ON deliveries (webhook_id, completed_at, id)
    WHERE status = 'exhausted';

-- GET /v1/events, newest first, by type or not; the time bounds become id
-- bounds (ids are UUIDv7).
CREATE INDEX events_tenant_type_idx ON events (tenant_id, event_type, id);

-- Every role that writes deliveries or attempts keeps their rollups; the
-- api and the console read them; retention removes the old ones.
GRANT SELECT, INSERT, UPDATE ON delivery_rollups, attempt_rollups, dead_letter_rollups
    TO hookline_api, hookline_worker, hookline_dlq;
GRANT DELETE ON delivery_rollups, attempt_rollups, dead_letter_rollups TO hookline_dlq;
