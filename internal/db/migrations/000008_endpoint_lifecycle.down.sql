DROP INDEX IF EXISTS deliveries_one_recovery_idx;
DELETE FROM batch_operations WHERE kind = 'recover';
ALTER TABLE batch_operations DROP CONSTRAINT IF EXISTS batch_operations_recovery_of_kind,
    DROP COLUMN IF EXISTS last_event_id, DROP COLUMN IF EXISTS upto_event_id,
    DROP COLUMN IF EXISTS recovery, DROP COLUMN IF EXISTS kind;
DROP FUNCTION IF EXISTS disable_failing_webhooks(integer, integer);
DROP TRIGGER IF EXISTS webhooks_record_pauses ON webhooks;
DROP FUNCTION IF EXISTS webhooks_record_pauses();
DROP TABLE IF EXISTS webhook_pauses;
DROP INDEX IF EXISTS webhooks_failing_idx;
ALTER TABLE tenants DROP COLUMN IF EXISTS auto_disable_failing_ms;
ALTER TABLE webhooks DROP CONSTRAINT IF EXISTS webhooks_active_not_disabled,
    DROP COLUMN IF EXISTS auto_disable_failing_ms, DROP COLUMN IF EXISTS circuit_reopens,
    DROP COLUMN IF EXISTS failing_since, DROP COLUMN IF EXISTS disabled_at, DROP COLUMN IF EXISTS disabled_reason;
