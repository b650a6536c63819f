-- Endpoint lifecycle: endpoints that keep failing are disabled
-- automatically, and what a webhook failed or missed over a time window can
-- be recovered (docs/DESIGN.md §10).

-- Why a webhook is disabled: NULL while it is active, 'manual' when its
-- tenant paused it, 'auto_disabled' when hookline did because it kept
-- failing; disabled_at is when. A webhook that is already disabled keeps
-- its reason; enabling it clears both.
--
-- failing_since is the time of the first failed attempt after the last
-- successful one (NULL while the last attempt succeeded), kept by the
-- worker's attempt-recording statement, which writes the row only when it
-- changes. circuit_reopens counts how often its circuit opened again after
-- failed probes since it last closed. auto_disable_failing_ms is the
-- webhook's own window (NULL: its tenant's; 0: never disabled
-- automatically).
ALTER TABLE webhooks
    ADD COLUMN disabled_reason text CHECK (disabled_reason IN ('manual', 'auto_disabled')),
    ADD COLUMN disabled_at timestamptz,
    ADD COLUMN failing_since timestamptz,
    ADD COLUMN circuit_reopens integer NOT NULL DEFAULT 0 CHECK (circuit_reopens >= 0),
    ADD COLUMN auto_disable_failing_ms bigint CHECK (auto_disable_failing_ms >= 0),
    ADD CONSTRAINT webhooks_active_not_disabled CHECK (NOT active OR (disabled_reason IS NULL AND disabled_at IS NULL));

-- Webhooks paused before this migration were paused by their tenants, at
-- the latest when they last changed.
UPDATE webhooks SET disabled_reason = 'manual', disabled_at = updated_at WHERE NOT active AND deleted_at IS NULL;

-- The tenant's window, set from defaults.tenant_auto_disable when the tenant
-- is created (5 days for the tenants that exist now); 0: never.
ALTER TABLE tenants ADD COLUMN auto_disable_failing_ms bigint NOT NULL DEFAULT 432000000
    CHECK (auto_disable_failing_ms >= 0);

-- The dlq's periodic look for webhooks to disable reads only the active
-- webhooks that are failing.
CREATE INDEX webhooks_failing_idx ON webhooks (failing_since)
    WHERE active AND deleted_at IS NULL AND (failing_since IS NOT NULL OR circuit_reopens > 0);

-- Every period a webhook spent disabled (resumed_at NULL while it lasts):
-- the events published meanwhile made no delivery to it, and a recovery
-- delivers them ("missed"). Written by the trigger below, whatever changes
-- the webhook, so that no path that disables or enables one can forget it.
CREATE TABLE webhook_pauses (
    webhook_id  uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    paused_at   timestamptz NOT NULL,
    resumed_at  timestamptz,
    PRIMARY KEY (webhook_id, paused_at)
);

INSERT INTO webhook_pauses (webhook_id, paused_at)
SELECT id, updated_at FROM webhooks WHERE NOT active AND deleted_at IS NULL;

CREATE FUNCTION webhooks_record_pauses() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.active AND NOT OLD.active THEN
        UPDATE webhook_pauses SET resumed_at = now() WHERE webhook_id = NEW.id AND resumed_at IS NULL;
    ELSIF NOT NEW.active AND NEW.deleted_at IS NULL AND (TG_OP = 'INSERT' OR OLD.active) THEN
        INSERT INTO webhook_pauses (webhook_id, paused_at) VALUES (NEW.id, now()) ON CONFLICT DO NOTHING;
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER webhooks_record_pauses AFTER INSERT OR UPDATE OF active ON webhooks
    FOR EACH ROW EXECUTE FUNCTION webhooks_record_pauses();

-- disable_failing_webhooks disables, at most max_rows at a time, the active
-- webhooks that have failed without a success for longer than their window
-- (the webhook's own, else its tenant's; 0 is never), or whose circuit
-- opened again max_reopens times in a row (0: not counted), and returns
-- them. It is the only change to webhooks the dlq process may make: it runs
-- as the owner of the schema (SECURITY DEFINER), so that the dlq's role
-- needs no UPDATE on webhooks nor any read of tenants.
CREATE FUNCTION disable_failing_webhooks(max_reopens integer, max_rows integer)
RETURNS TABLE (webhook_id uuid, tenant_id uuid, url text, disabled_at timestamptz, failing_since timestamptz,
               failing_for_ms bigint, circuit_reopens integer)
LANGUAGE sql SECURITY DEFINER AS $$
    WITH due AS (
        SELECT w.id, coalesce(w.auto_disable_failing_ms, t.auto_disable_failing_ms) AS ms
        FROM webhooks w JOIN tenants t ON t.id = w.tenant_id
        WHERE w.active AND w.deleted_at IS NULL AND (w.failing_since IS NOT NULL OR w.circuit_reopens > 0)
          AND coalesce(w.auto_disable_failing_ms, t.auto_disable_failing_ms) > 0
          AND (w.failing_since <= now() - coalesce(w.auto_disable_failing_ms, t.auto_disable_failing_ms) * interval '1 millisecond'
               OR (max_reopens > 0 AND w.circuit_reopens >= max_reopens))
        ORDER BY w.id
        LIMIT max_rows
        FOR UPDATE OF w SKIP LOCKED
    )
    UPDATE webhooks w SET active = false, disabled_reason = 'auto_disabled', disabled_at = now(), updated_at = now()
    FROM due
    WHERE w.id = due.id AND w.active AND w.deleted_at IS NULL
    RETURNING w.id, w.tenant_id, w.url, w.disabled_at, w.failing_since, due.ms, w.circuit_reopens
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION disable_failing_webhooks(integer, integer) SET search_path = %I, pg_temp', current_schema());
END $$;
REVOKE EXECUTE ON FUNCTION disable_failing_webhooks(integer, integer) FROM PUBLIC;

-- Batch operations of a second kind: a webhook's recovery. Its parameters
-- (the webhook, the window, what it includes, and the counts fixed when it
-- starts) are in recovery; it walks the webhook's exhausted deliveries
-- first (upto_delivery_id, last_delivery_id), then the events it missed
-- (upto_event_id, last_event_id).
ALTER TABLE batch_operations
    ADD COLUMN kind text NOT NULL DEFAULT 'retry' CHECK (kind IN ('retry', 'recover')),
    ADD COLUMN recovery jsonb,
    ADD COLUMN upto_event_id uuid,
    ADD COLUMN last_event_id uuid,
    ADD CONSTRAINT batch_operations_recovery_of_kind CHECK ((kind = 'recover') = (recovery IS NOT NULL));

-- A missed event is given at most one delivery to a webhook by recoveries,
-- however many run at once: they are the only deliveries made by a batch
-- without retrying one (retry_of NULL). The recovery also checks, in the
-- transaction of the insert, that the event has no delivery to the webhook
-- at all.
CREATE UNIQUE INDEX deliveries_one_recovery_idx ON deliveries (event_id, webhook_id)
    WHERE batch_operation_id IS NOT NULL AND retry_of IS NULL;

-- worker: keeps failing_since with each attempt it records, and counts
-- circuit re-openings.
GRANT UPDATE (failing_since, circuit_reopens) ON webhooks TO hookline_worker;
-- api: the trigger above writes the pauses of what the api changes.
GRANT SELECT, INSERT, UPDATE ON webhook_pauses TO hookline_api;
-- dlq: disables failing webhooks (only through the function above) and
-- audits it; a recovery reads the webhook's pauses and creation time.
GRANT EXECUTE ON FUNCTION disable_failing_webhooks(integer, integer) TO hookline_dlq;
GRANT INSERT ON audit_log TO hookline_dlq;
GRANT SELECT ON webhook_pauses TO hookline_dlq;
GRANT SELECT (created_at) ON webhooks TO hookline_dlq;
