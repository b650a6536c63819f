-- The console's and the portal's webhooks pages show each webhook's last
-- attempt. They found it in delivery_attempts_webhook_idx, one probe per
-- webhook in every daily partition of the attempt log: about 7,700 pages
-- for a page of 50 webhooks over 46 partitions (bench/history, 20 million
-- attempts), and more the longer attempts are kept.
--
-- webhook_last_attempts holds the last attempt of each webhook. The worker
-- adds the attempts it tallies once a second (internal/history, Tally); a
-- trigger adds every other attempt, as for the rollups. A row is replaced
-- only by a later attempt. Its updates touch no indexed column, so they
-- are HOT and leave nothing for a vacuum.
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

-- The attempts no process tallies (as for the rollups, migration 000014):
-- the last of each webhook among the rows of the statement. The attempt
-- log does not require its webhooks to exist; an attempt of a webhook
-- that does not (any more) is not kept here, and does not fail.
CREATE FUNCTION attempts_last_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO webhook_last_attempts AS l (webhook_id, tenant_id, executed_at, status_code, error)
    SELECT DISTINCT ON (n.webhook_id) n.webhook_id, n.tenant_id, n.executed_at, n.status_code, n.error
    FROM new_rows n JOIN webhooks w ON w.id = n.webhook_id
    ORDER BY n.webhook_id, n.executed_at DESC
    ON CONFLICT (webhook_id) DO UPDATE SET executed_at = excluded.executed_at, status_code = excluded.status_code,
        error = excluded.error
    WHERE excluded.executed_at > l.executed_at;
    RETURN NULL;
END $$;

CREATE TRIGGER attempts_last_insert AFTER INSERT ON delivery_attempts
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
    WHEN (current_setting('hookline.rollups', true) IS DISTINCT FROM 'process')
    EXECUTE FUNCTION attempts_last_insert();

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
